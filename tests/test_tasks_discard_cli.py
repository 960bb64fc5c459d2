"""``tasks discard`` and ``tasks list`` on unhandled tasks (cleanup tasks Polaris never runs)."""

from __future__ import annotations

import io
import json

from polaris_pipeline.cli import main
from polaris_pipeline.metastore import Metastore
from tests.support.unhandled import seed_unhandled


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_cli_lists_and_discards_unhandled_tasks(metastore: Metastore) -> None:
    url = metastore.url.render_as_string(hide_password=False)
    unhandled, normal = seed_unhandled(metastore)
    code, out = _cli("tasks", "list", "--metastore", url, "--state", "unhandled", "--json")
    assert code == 0
    assert sorted(int(d["id"]) for d in json.loads(out)) == sorted(t.id for t in unhandled)
    assert {d["state"] for d in json.loads(out)} == {"unhandled"}

    code, out = _cli("tasks", "discard", "--metastore", url, "--all-unhandled", "--dry-run")
    assert code == 0, out
    assert out.count("would discard") == len(unhandled) and "nothing was changed" in out
    assert metastore.count_tasks() == len(unhandled) + 1

    code, out = _cli("tasks", "discard", "--metastore", url, str(normal.id))
    assert code == 2 and "refused" in out and "not unhandled" in out
    assert metastore.get_task("POLARIS", normal.id) is not None

    code, out = _cli(
        "tasks", "discard", "--metastore", url, "--realm", "POLARIS", "--all-unhandled"
    )
    assert code == 0 and f"{len(unhandled)} unhandled task(s) discarded" in out
    assert [t.id for t in metastore.list_tasks()] == [normal.id]


def test_cli_discard_needs_ids_or_all_unhandled(metastore: Metastore) -> None:
    url = metastore.url.render_as_string(hide_password=False)
    assert _cli("tasks", "discard", "--metastore", url)[0] == 2
    assert _cli("tasks", "discard", "--metastore", url, "--all-unhandled", "1")[0] == 2
