"""The callbacks ansible-runner calls during one run (events, status, cancel) and the RunState they
fold the events into; the run and the wait after its cancel each have one."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpubring.events import (
    Cancelled,
    Event,
    Output,
    PhasePlay,
    PhaseTracker,
    PlayStart,
    RunState,
    parse_all,
)
from gpubring.run.cancel import CancelFlag, Reaper
from gpubring.run.folder import owner_only, scrub_command_artifact
from gpubring.run.settings import RunSettings


class Session:
    """The callbacks ansible-runner calls during one run, and the state they fold events into."""

    def __init__(
        self,
        settings: RunSettings,
        folder: Path,
        plays: Sequence[PhasePlay],
        envvars: Mapping[str, str],
        *,
        on_event: Callable[[Event], None] | None,
        cancel: CancelFlag,
        ident: str = "",
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.state = RunState()
        self.tracker = PhaseTracker(plays)
        self.reaper = Reaper(folder)
        self.artifact_dir = folder / "artifacts" / (ident or folder.name)
        self.envvars = envvars
        self.on_event = on_event
        self.cancel = cancel
        self.should_stop = should_stop or cancel.is_set

    def emit(self, event: Event) -> None:
        self.state.apply(event)
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception as exc:  # the display must not abandon a half-done run on its hosts
            self.on_event = None
            self.state.notices.append(f"the live view stopped ({exc!r}); the run went on")

    def event_handler(self, raw: dict[str, Any]) -> bool:
        if self.settings.options.verbosity and raw.get("stdout"):
            self.emit(Output(str(raw["stdout"])))
        for event in parse_all(raw):
            self.emit(self.tracker.play_started(event) if isinstance(event, PlayStart) else event)
        return True

    def status_handler(self, data: Mapping[str, Any], runner_config: Any = None) -> None:
        if data.get("status") == "running":
            scrub_command_artifact(self.artifact_dir, self.envvars)

    def cancel_callback(self) -> bool:
        if not self.should_stop():
            return False
        if not self.reaper.seen:
            self.reaper.snapshot()
        return True

    def finish(self, runner_status: str) -> None:
        if self.reaper.seen:
            self.reaper.sweep()
        scrub_command_artifact(self.artifact_dir, self.envvars)
        owner_only(self.artifact_dir.parent)
        if runner_status == "canceled" or (not runner_status and self.should_stop()):
            self.emit(Cancelled(self.cancel.reason or "cancelled"))
