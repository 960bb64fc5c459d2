"""The operator CLI called in-process, as the CLI tests call it."""

from __future__ import annotations

import io

from polaris_pipeline.cli import main
from polaris_pipeline.metastore import Metastore

POLICY_FLAGS = ["--grace-ms", "0"]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def url_of(store: Metastore) -> str:
    return store.url.render_as_string(hide_password=False)
