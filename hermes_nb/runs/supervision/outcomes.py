"""Typed outcomes of launching a run's processes; every caller handles each kind."""

from __future__ import annotations

from pydantic import BaseModel


class Launched(BaseModel):
    pass


class StopRequested(BaseModel):
    pass


class LaunchFailed(BaseModel):
    process: str
    cause: str
    log_path: str
    log_tail: list[str]

    def message(self) -> str:
        tail = "\n".join(f"    {line}" for line in self.log_tail)
        text = f"{self.process} {self.cause} (log: {self.log_path})"
        return f"{text}\n  last lines of the log:\n{tail}" if tail else text


LaunchOutcome = Launched | StopRequested | LaunchFailed
