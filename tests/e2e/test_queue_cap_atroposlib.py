"""An unmodified atroposlib environment posting into a full queue: atroposlib's own ``_send_scored_data_to_api``
(from the atropos side environment) against the real API process with a cap. It retries the 503 (atroposlib
retries 5xx, not 4xx), gives up without crashing when the queue stays full, and its post is accepted once the
trainer has pulled a batch; the API keeps exactly what it acknowledged."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from side_envs import side_env_python

from hermes_nb.protocol.trajectory import MASK_IGNORE, HealthResponse
from hermes_nb.system.net import LOOPBACK, free_port

pytestmark = [pytest.mark.e2e]

GROUP = {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[MASK_IGNORE, 2, 3], [MASK_IGNORE, 2, 4]], "scores": [0.0, 1.0]}
# atroposlib's environment code, unmodified: only the object it is bound to is a stand-in for a whole BaseEnv.
SEND = textwrap.dedent(
    """
    import asyncio, json, sys, types
    from atroposlib.envs.base import BaseEnv

    env = types.SimpleNamespace(config=types.SimpleNamespace(rollout_server_url=sys.argv[1]), env_id=None)
    env._post_json_with_compression = lambda *a, **k: BaseEnv._post_json_with_compression(env, *a, **k)
    try:
        asyncio.run(BaseEnv._send_scored_data_to_api(env, json.loads(sys.argv[2])))
        print("sent")
    except Exception as exc:
        print("gave up:", type(exc).__name__)
    """
)


@pytest.fixture
def full_api(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real API with a cap of 2 sequences, a trainer registered (batches of 2) and one group of 2 queued."""
    port = free_port()
    log = tmp_path / "api.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "hermes_nb.trajectory_api", "--port", str(port), "--max-queued-sequences", "2"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{LOOPBACK}:{port}"
    try:
        wait_until_up(url)
        httpx.post(f"{url}/register", json={"batch_size": 2, "max_token_len": 8, "num_steps": 5}).raise_for_status()
        httpx.post(f"{url}/scored_data", json=GROUP).raise_for_status()
        yield url, log
    finally:
        server.terminate()
        server.wait(10)


def wait_until_up(url: str) -> None:
    for _ in range(200):
        try:
            httpx.get(f"{url}/health", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"the API at {url} did not come up")


def atroposlib_send(url: str) -> str:
    python = side_env_python("atropos")
    group = httpx.Request("POST", url, json=GROUP).content.decode()
    done = subprocess.run([str(python), "-c", SEND, url, group], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def held(url: str) -> int:
    return HealthResponse.model_validate(httpx.get(f"{url}/health").json()).held_sequences


def test_atroposlib_retries_a_full_queue_gives_up_cleanly_and_posts_once_there_is_room(
    full_api: tuple[str, Path],
) -> None:
    url, log = full_api

    refused = atroposlib_send(url)
    refusals = log.read_text().count("-> 503:")
    held_while_full = held(url)
    assert httpx.get(f"{url}/batch").json()["batch"]  # the trainer pulls the group that was there
    accepted = atroposlib_send(url)

    assert refused == "gave up: RetryError" and refusals == 3  # atroposlib's three attempts, all refused
    assert held_while_full == 2  # what was acknowledged stayed; nothing refused was added
    assert accepted == "sent" and held(url) == 2
