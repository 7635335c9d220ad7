"""A loopback stand-in judge: an OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1 that checks the requests
it gets (the judge's model, the rubric) and answers deterministic scores, for ``hermes_nb.env.judge``'s tests.

Queued ``answers`` go first (a dict is sent as the JSON content, a str as is, an int as that HTTP status,
``"sleep"`` waits past a short client timeout); with none queued it scores by itself: a ranking request's answer
``i`` of ``n`` gets ``i / (n - 1)``, an absolute request 1.0 for a non-empty answer. A request for another model
or without the rubric is answered 400, which the judge turns into a failed group."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STANDIN_MODEL = "stand-in-judge"
STANDIN_RUBRIC = "One line, vivid."
# Past the timeout the tests give a judge that should time out, short of any test's patience.
SLEEP_S = 1.0


class StandInJudge:
    def __init__(self, model: str = STANDIN_MODEL, rubric: str = STANDIN_RUBRIC) -> None:
        self.model, self.rubric = model, rubric
        self.answers: list[Any] = []
        self.requests: list[dict[str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict[str, Any]) -> Any:
        """What to send back for ``body``: the next queued answer, or a deterministic score (module doc)."""
        self.requests.append(body)
        if self.answers:
            return self.answers.pop(0)
        user = body["messages"][-1]["content"]
        if body.get("model") != self.model or self.rubric not in user:
            return 400
        ranked = re.findall(r"^Answer (\d+):", user, flags=re.MULTILINE)
        if ranked:
            n = len(ranked)
            return {
                "scores": [{"index": i, "score": i / max(n - 1, 1), "reason": f"rank {i} of {n}"} for i in range(n)]
            }
        answer = user.rsplit("Answer:\n", 1)[-1]
        return {"score": 1.0 if answer.strip() else 0.0, "reason": "answered" if answer.strip() else "empty"}


def _handler(stand_in: StandInJudge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answer = stand_in.answer({"path": self.path, **body})
            if answer == "sleep":
                threading.Event().wait(SLEEP_S)
                answer = 500
            if isinstance(answer, int):
                self.send_response(answer)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            content = answer if isinstance(answer, str) else json.dumps(answer)
            reply = {
                "choices": [{"message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
