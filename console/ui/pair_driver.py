"""The driving console's side of pair-debugging (console/incident/pairing.py says the words):

- what another writer adds to the incident — a follower's hypothesis or note, a second
  console's words — is said on the status line (and kept in ``m``) as it lands, naming who;
- continuing an incident (``--incident ID`` on one that holds entries) says so once: "continuing
  ID: 14 entries, H1 confirmed, 2 actions";
- the hint names the command that shows a second person the same panels (``follow ID --live``);
- an open Confirm is handed to the follower's mirror, and how it ended (ui/confirm.py calls
  ``confirm_opened`` / ``confirm_answered``).
"""
from __future__ import annotations

import asyncio
import logging

from console.incident.pairing import OthersNews, follow_command, news_line, recap
from console.incident.timeline import operator_id
from console.textsafe import printable

#: how often the driving console looks for what the others appended
NEWS_S = 1.0

log = logging.getLogger("gpu_incident.ui")


class PairDriver:
    def __init__(self, app) -> None:
        self.app = app
        self.news: OthersNews | None = None
        self._busy = False
        self._named: tuple[str] | None = None

    @property
    def timeline(self):
        return self.app.timeline

    def start(self) -> None:
        """At mount, before the console's own start note: say what the incident held, and look
        for the others' words from now on."""
        tl = self.timeline
        if tl is None:
            return
        if self.app.activity.latest is not None:
            # something was said at the start ("new incident ID"): the hint, which shows only
            # while nothing is, is said after it (and kept in m)
            self.app.say(self.idle_text())
        said = recap([e for e in tl.entries if e.seq not in tl.own], tl.incident_id)
        if said:
            self.app.say(said)
        self.news = OthersNews(tl)
        self.app.set_interval(NEWS_S, self.look, name="the others' words")

    async def look(self) -> None:
        """Read what the others appended (in a thread: their lock or a slow disk never holds a
        key) and say each hypothesis, note and verdict, with who wrote it."""
        tl, news = self.timeline, self.news
        if tl is None or news is None or self._busy:
            return
        self._busy = True
        try:
            await asyncio.to_thread(tl.refresh)
        except OSError as exc:
            log.debug("timeline refresh: %s", exc)
            return
        finally:
            self._busy = False
        for e in news.news():
            self.app.say("✎ " + news_line(e, tl.entries))

    def named(self) -> str | None:
        """Who this console writes as, where ``--as`` named the person (else None: the user,
        as every console is)."""
        if self._named is None:         # once: the status line asks at every redraw
            tl = self.timeline
            self._named = (tl.by if tl is not None and tl.by != operator_id() else "",)
        return self._named[0] or None

    def idle_text(self) -> str:
        """The hint when nothing else is said: who this console writes as (when ``--as`` named
        the person), and what a second person runs to see the same panels."""
        tl = self.timeline
        if tl is None:
            return "no incident file (nothing is recorded)"
        named = self.named()
        who = f"as {printable(named, 60)} · " if named else ""
        return f"{who}a second person: {follow_command(tl.path)} · m: messages"


def confirm_opened(app, plan) -> None:
    """A Confirm opened on the driving console: its follower sees what is about to run (written
    by the engine, through the screen's door to it)."""
    facade = getattr(app, "facade", None)
    if facade is None:
        return
    mode = "read-only" if getattr(app, "read_only", False) else "dry-run" if getattr(app, "dry_run", False) else None
    facade.confirm_opened(plan, mode=mode)


def confirm_answered(app, ran: bool) -> None:
    """The Confirm closed: run (y, the typed name) or cancelled."""
    facade = getattr(app, "facade", None)
    if facade is not None:
        facade.confirm_answered(ran)
