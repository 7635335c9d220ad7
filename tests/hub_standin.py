"""A hub cache as huggingface_hub lays it out, and a loopback stand-in for the hub's HTTP API (``HF_ENDPOINT``).

The stand-in answers what ``snapshot_download`` asks (the revision's commit, the file tree, each file) for the
repositories it is given, and records every request with its ``Authorization`` header, for tests to check what
hermes-nb's resolver sends. Unknown repositories answer 404 ``RepoNotFound``, gated ones 403 ``GatedRepo``, as the
hub does.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write_hub_cache(cache: Path, repo: str, source: Path, commit: str = COMMIT, ref: str = "main") -> Path:
    """``cache/models--org--name/snapshots/COMMIT/`` with ``source``'s files, and ``refs/REF`` naming the commit."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for path in source.iterdir():
        (snapshot / path.name).write_bytes(path.read_bytes())
    (folder / "refs").mkdir()
    (folder / "refs" / ref).write_text(commit, encoding="utf-8")
    return snapshot


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with its query
    authorization: str | None


@dataclass
class StandInHub:
    url: str
    repos: dict[str, dict[str, bytes]]  # org/name -> file name -> content
    gated: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)

    def model_requests(self) -> list[Request]:
        """The requests about models (huggingface_hub also asks the hub about its own updates)."""
        return [r for r in self.requests if r.path.startswith("/api/models/") or "/resolve/" in r.path]


def _handler(hub: StandInHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            hub.requests.append(Request(self.command, self.path, self.headers.get("authorization")))
            path = self.path.split("?")[0]
            for repo, files in hub.repos.items():
                about_repo = path.startswith((f"/api/models/{repo}/", f"/{repo}/"))
                if about_repo and repo in hub.gated and self.headers.get("authorization") is None:
                    return self._send(403, b"{}", {"X-Error-Code": "GatedRepo"})
                if path.startswith(f"/api/models/{repo}/revision/"):
                    siblings = [{"rfilename": name} for name in files]
                    return self._json({"id": repo, "sha": COMMIT, "siblings": siblings})
                if path.startswith(f"/api/models/{repo}/tree/{COMMIT}"):
                    return self._json([_tree_entry(name, body) for name, body in files.items()])
                prefix = f"/{repo}/resolve/{COMMIT}/"
                if path.startswith(prefix) and path[len(prefix) :] in files:
                    body = files[path[len(prefix) :]]
                    etag = f'"{hashlib.sha1(body).hexdigest()}"'
                    return self._send(200, body, {"ETag": etag, "X-Repo-Commit": COMMIT})
            self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"})

        def _json(self, data: object) -> None:
            self._send(200, json.dumps(data).encode(), {"Content-Type": "application/json"})

        def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(code)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler


def _tree_entry(name: str, body: bytes) -> dict[str, object]:
    return {"type": "file", "oid": hashlib.sha1(body).hexdigest(), "size": len(body), "path": name}


@contextmanager
def stand_in_hub(repos: dict[str, dict[str, bytes]], gated: set[str] | None = None) -> Iterator[StandInHub]:
    hub = StandInHub(url="", repos=repos, gated=gated or set())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
