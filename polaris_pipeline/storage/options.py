"""Which fsspec filesystem serves a scheme, and which keyword arguments it accepts.

s3fs hands unknown keywords on to botocore, so a misspelt option would go unnoticed;
the storage config is checked at load. Accepted: the named ``__init__`` parameters of
the filesystem class and each base it hands ``**kwargs`` to, down to fsspec's
``AbstractFileSystem`` (whose documented options are accepted everywhere). For ``s3``,
``S3FileSystem``'s own (``client_kwargs``, ``config_kwargs``), fsspec's and the
session's (``profile``). An uninstalled scheme is not checked here: a task reaching it
fails with "install <package>".
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from polaris_pipeline.errors import StorageConfigError, StorageError
from polaris_pipeline.storage.uri import SCHEMES

if TYPE_CHECKING:
    from fsspec.spec import AbstractFileSystem

# AbstractFileSystem.__init__ takes **storage_options and documents these.
BASE_OPTIONS = frozenset(
    {
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "skip_instance_cache",
        "asynchronous",
        "loop",
    }
)


def _init_params(cls: type) -> tuple[set[str], bool]:
    """Named keyword parameters of ``cls.__init__`` and whether it takes ``**kwargs``."""
    init = cls.__dict__.get("__init__")
    if init is None:
        return set(), True  # inherited: the base's parameters apply
    names: set[str] = set()
    var_kw = False
    for param in inspect.signature(init).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            var_kw = True
        elif param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            names.add(param.name)
    names.discard("self")
    return names, var_kw


def accepted_options(cls: type) -> frozenset[str]:
    """The keyword arguments ``cls`` accepts, by the rule of this module's doc."""
    from fsspec.spec import AbstractFileSystem  # see filesystem_class

    names: set[str] = set(BASE_OPTIONS)
    for klass in cls.__mro__:
        if klass is AbstractFileSystem or klass is object:
            break
        own, forwards = _init_params(klass)
        names |= own
        if klass.__module__.startswith("s3fs.") and klass.__name__ == "S3FileSystem":
            # Its **kwargs go to aiobotocore's session, not to its base classes.
            names |= _aiobotocore_session_params()
            break
        if not forwards:
            break
    return frozenset(names)


def _aiobotocore_session_params() -> set[str]:
    try:
        from aiobotocore.session import AioSession
    except ImportError:  # pragma: no cover - s3fs depends on it
        return set()
    names, _ = _init_params(AioSession)
    return names


def filesystem_class(scheme: str) -> type[AbstractFileSystem]:
    """The installed fsspec class serving ``scheme``; StorageError naming what is missing."""
    # fsspec (a tenth of a second) is imported when a filesystem is looked up, not
    # with the storage config: the CLI and the sensors read the config only.
    import fsspec
    from fsspec.registry import known_implementations

    protocol = SCHEMES.get(scheme, (scheme, None))[0]
    try:
        cls: type[AbstractFileSystem] = fsspec.get_filesystem_class(protocol)
    except ImportError:
        known: dict[str, Any] = known_implementations.get(protocol, {})
        package = str(known.get("class", "")).split(".", 1)[0]
        if package and package != "fsspec":
            raise StorageError(f"no filesystem for scheme {scheme!r}: install {package}") from None
        hint = known.get("err") or "its implementation cannot be imported"
        raise StorageError(f"no filesystem for scheme {scheme!r}: {hint}") from None
    except ValueError:
        raise StorageError(f"no filesystem for scheme {scheme!r}") from None
    return cls


def is_s3(fs: AbstractFileSystem) -> bool:
    # By protocol, not isinstance: callers touching only local files never import s3fs.
    protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    return "s3" in protocols and hasattr(fs, "call_s3")


def check_options(scheme: str, options: Mapping[str, Any], where: str) -> None:
    """Raise StorageConfigError naming the first option the filesystem would not accept."""
    try:
        cls = filesystem_class(scheme)
    except StorageError:
        return  # not installed: using it fails with "install <package>" instead
    allowed = accepted_options(cls)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise StorageConfigError(
            f"{where}: {cls.__name__} ({scheme}://) accepts no option {unknown[0]!r}"
            f"{_hint(unknown[0], allowed, scheme)}"
        )


def _hint(name: str, allowed: Iterable[str], scheme: str) -> str:
    close = [a for a in sorted(allowed) if name in a or a in name]
    if close:
        return f"; did you mean {close[0]!r}?"
    if scheme == "s3":
        return (
            "; botocore client options go under client_kwargs, Config options under config_kwargs"
        )
    return ""
