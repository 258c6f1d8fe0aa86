"""Keys that change what the tables show, not the node: `/` filters the table in focus (the
node table's nodes, else the processes) and `esc` clears a filter; `o`, `F5` and `F6` order the
processes; and a key another tool taught that is no key here says which key does that job
(console/ui/keys.py HABITS).

``ViewKeys`` belongs to the App (``app.view_keys``) and sets its view state (``proc_filter``,
``node_filter``, ``proc_sort``): the App's watchers draw what changed."""
from __future__ import annotations

from typing import Any

from console.output.rows import SORTS, order_words
from console.ui import keys


class ViewKeys:
    def __init__(self, app: Any) -> None:
        self.app = app
        self._flat_sort = "memory"          # F5 goes back to this flat order

    @property
    def on_node_table(self) -> bool:
        nodes = self.app.query("#nodes")
        return bool(nodes) and self.app.focused is nodes.first()

    def filter(self) -> None:
        """/ (F3, F4): filters the table in focus (k9s's way): the nodes on the node table, else
        the processes."""
        from console.ui.prompts import TextPrompt
        app = self.app
        if self.on_node_table:
            def got_nodes(text: str | None) -> None:
                if text is not None:
                    app.node_filter = text.strip()
            app.push_screen(TextPrompt("Filter the nodes (a part of the name, its error or a finding's kind; "
                                       "empty clears)", value=app.node_filter), got_nodes)
            return

        def got(text: str | None) -> None:
            if text is not None:
                app.proc_filter = text.strip()
        app.push_screen(TextPrompt("Filter processes (name, command line, PID or user; empty clears)",
                                   value=app.proc_filter), got)

    def clear_filter(self) -> None:
        """esc: the filter of the panel in focus goes, or, where that panel has none, the one that
        is set (the process filter first). With none set, esc is the fleet key's (check_action)."""
        app = self.app
        node_first = self.on_node_table and app.node_filter
        if app.proc_filter and not node_first:
            app.proc_filter = ""
            app.say("process filter cleared" + (f" (the node filter “{app.node_filter}” stays: esc again)"
                                                if app.node_filter else ""))
        elif app.node_filter:
            app.node_filter = ""
            app.say("node filter cleared: every node is listed")

    def sort(self) -> None:
        """o: the process panel's next order (tree, GPU memory, PID, user); the cursor stays on its
        process."""
        app = self.app
        app.proc_sort = SORTS[(SORTS.index(app.proc_sort.removeprefix("-")) + 1) % len(SORTS)]
        app.say(f"processes: {order_words(app.proc_sort)} (o: next order, F6: choose or reverse)")

    def tree(self) -> None:
        """F5 (htop's tree): the processes as a tree, or back to the flat order they had."""
        app = self.app
        if app.proc_sort != "tree":
            self._flat_sort, app.proc_sort = app.proc_sort, "tree"
        else:
            app.proc_sort = self._flat_sort
        app.say(f"processes: {order_words(app.proc_sort)} (F5: {'flat' if app.proc_sort == 'tree' else 'tree'}, "
                "F6: choose the order)")

    def order_menu(self) -> None:
        """F6 (htop's order): a chooser of every order, each flat one also reversed."""
        from console.ui.order_menu import OrderMenu
        app = self.app

        def chosen(order: str | None) -> None:
            if order is not None:
                app.proc_sort = order
                app.say(f"processes: {order_words(order)}")
        app.push_screen(OrderMenu(app.proc_sort), chosen)

    def habit(self, key: str) -> None:
        """A key another tool taught (j, \\, F2 …) that is no key here: say which key does that
        job here, on the main screen, when nothing is bound to it."""
        app = self.app
        if len(app.screen_stack) != 1 or key in app.active_bindings:
            return
        hint = keys.habit(key, app.keymap)
        if hint is not None:
            app.say(hint, "warning")
