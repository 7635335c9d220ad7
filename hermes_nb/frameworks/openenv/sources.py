"""OpenEnv sources that need what this machine lacks, found before anything is launched (nothing imported).

A run plays an OpenEnv environment against its app served here, from its folder in the OpenEnv Python (the
manifest's ``runtime: fastapi`` and ``app``: what ``openenv init`` writes and every ``envs/*/openenv.yaml`` of
OpenEnv's repository declares), or against ``env.server_url``, a server the user started. Two sources need more:

- a manifest whose runtime is a Docker image (``runtime: docker``, or an ``image``): hermes-nb starts no
  container, and the image may hold what the folder lacks;
- a Hugging Face Space (``env.server_url`` as OpenEnv's ``from_env`` takes one: ``owner/name``, its
  ``huggingface.co/spaces/`` page or its ``*.hf.space`` host): a server on the Hub's hardware, shared, behind the
  network, which a run here neither starts nor stops.

Each is refused with one line naming why and what works instead: a server you started, named by ``env.server_url``.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import yaml

from hermes_nb.frameworks.openenv.app_main import MANIFEST, package_root

# The runtime a package is served with from its folder: openenv init's, and OpenEnv 0.10.0's own envs'.
SERVED_RUNTIME = "fastapi"
# Manifest keys that name a container image to run rather than an app to serve.
IMAGE_KEYS = ("image", "docker_image", "base_image")
SPACE_HOST_SUFFIX = ".hf.space"
SPACE_PAGE = re.compile(r"^(?:https?://)?(?:www\.)?huggingface\.co/spaces/([^/\s]+/[^/\s]+)")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name, no scheme: a Space as OpenEnv's from_env names it
INSTEAD = "start its server yourself and set env.server_url to it (e.g. env.server_url=http://127.0.0.1:8000)"


def refusal(file: str, server_url: str | None) -> str | None:
    """Why a run cannot play the OpenEnv environment in ``file`` (with ``server_url``, if set); ``None``: it can."""
    if server_url:
        return _space_refusal(server_url)
    root = package_root(file)
    return _image_refusal(root / MANIFEST) if root is not None else None


def _space_refusal(server_url: str) -> str | None:
    space = _space(server_url.strip())
    if space is None:
        return None
    return (
        f"env.server_url {server_url!r} is a Hugging Face Space ({space}): a run plays against a server on this "
        f"machine, and a Space runs on the Hub's hardware, which a run neither starts nor reaches; clone it (git "
        f"clone https://huggingface.co/spaces/{space if '/' in space else 'OWNER/NAME'}) and put its folder on the "
        f"environments path, or {INSTEAD}"
    )


def _space(url: str) -> str | None:
    """The Space ``url`` names: ``owner/name`` for a hub id or its page, its host for a ``*.hf.space`` address
    (which does not say where the owner's name ends); ``None`` for any other server."""
    if HUB_ID.match(url):
        return url
    if page := SPACE_PAGE.match(url):
        return page.group(1)
    host = urlparse(url if "://" in url else f"http://{url}").hostname or ""
    return host if host.endswith(SPACE_HOST_SUFFIX) else None


def _image_refusal(manifest: Path) -> str | None:
    try:
        data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None  # unreadable: the server's start reports it with its log
    if not isinstance(data, dict):
        return None
    image = next((f"{key}: {data[key]}" for key in IMAGE_KEYS if data.get(key)), None)
    runtime = data.get("runtime")
    if image is None and runtime in (None, SERVED_RUNTIME):
        return None
    declared = ", ".join(d for d in (f"runtime: {runtime}" if runtime else "", image or "") if d)
    return (
        f"{manifest} runs the environment from a Docker image ({declared}), and hermes-nb starts no container: "
        f"serve it from its folder (runtime: {SERVED_RUNTIME} with its app, as openenv init writes), or run the "
        f"image and {INSTEAD}"
    )
