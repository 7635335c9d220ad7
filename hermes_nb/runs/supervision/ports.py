"""The two loopback ports of a run and every config field that names them.

The launcher picks both ports free; another process can still take one before the run's process binds it
(``hermes_nb.system.net.free_port``), so the supervisor then picks new ones and starts the run again.
"""

from __future__ import annotations

from hermes_nb.config import RunConfig, locked_env_values
from hermes_nb.system.net import LOOPBACK, free_port

# The process of the run that binds each port (the trainer serves inference in its own process).
PORT_BINDERS = ("api", "trainer")


def pick_ports() -> tuple[int, int]:
    """Two different free loopback ports: the trajectory API's, then the inference server's."""
    api_port, inference_port = free_port(), free_port()
    while inference_port == api_port:
        inference_port = free_port()
    return api_port, inference_port


def with_ports(config: RunConfig, api_port: int, inference_port: int) -> RunConfig:
    """``config`` with the ports, the URLs built on them and the environment's API URL.

    A run that trains from an external API (``trainer.external_api_url``) binds no API port: its API URL is
    that one, and ``api_port`` stays empty (the run starts no API process).
    """
    external = config.trainer.external_api_url
    api_url = external or f"http://{LOOPBACK}:{api_port}"
    infra = config.infra.model_copy(
        update={
            "api_url": api_url,
            "inference_url": f"http://{LOOPBACK}:{inference_port}",
            "api_port": None if external else api_port,
            "inference_port": inference_port,
        }
    )
    env = {**config.env, **locked_env_values(infra, config.trainer.base_model)}
    return config.model_copy(update={"infra": infra, "env": env})
