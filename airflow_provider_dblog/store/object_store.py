"""Object storage for the lake and the state: ``s3://BUCKET/PREFIX`` locations, with credentials and
endpoint from the standard variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``) that delta-rs and pyarrow read: no secret ever passes through
dblog's arguments, state or logs. ``check_location`` turns the usual mistakes into one line naming the
fix before anything is written (``check_sink`` for ``--sink``; ``store.files`` runs it for ``--state``).

The process environment is the one place the settings live: the Airflow operators put an ``aws``
connection's there (the spark-submit child's environment, or their own while a step runs), and a Spark
driver ships its ``settings()`` to the executors inside the serialized tasks (``use_settings`` there),
as it ships the source password: never in Spark conf, which the UI and event logs show."""
from __future__ import annotations

import os
from urllib.parse import urlparse

from airflow_provider_dblog.core.config import truthy
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.parallel import THREADS


SETTINGS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL",
            "AWS_ALLOW_HTTP")
REFUSED = ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403")


LOCAL_TABLE_THREADS = THREADS  # per-table lake work on a local path is CPU (``core.parallel``: 2 and 8 were slower)
OBJECT_STORE_TABLE_THREADS = 16  # on object storage it waits on requests (≈10 per table commit): more at once


def is_object_store(uri: str) -> bool:
    return "://" in str(uri) and not str(uri).startswith("file://")


def table_threads(location: str) -> int:
    """Threads for work done table by table on the lake at ``location`` (opening, checking, committing):
    ``docs/benchmarks.md``, "Whole databases"."""
    return OBJECT_STORE_TABLE_THREADS if is_object_store(location) else LOCAL_TABLE_THREADS


def settings() -> dict[str, str]:
    """This process's object-store settings (the ``SETTINGS`` variables that are set)."""
    return {name: os.environ[name] for name in SETTINGS if os.environ.get(name)}


def use_settings(values: dict[str, str]) -> None:
    """On an executor: the driver's settings, so that delta-rs sees the store the driver checked; an
    executor then needs no credentials of its own (its own apply when the driver had none)."""
    os.environ.update(values)


def s3_filesystem():
    """pyarrow's S3 filesystem configured from the standard variables (the SDK reads the keys itself);
    returns it and the endpoint's name for messages."""
    import pyarrow.fs as pafs

    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    options = {"region": os.environ.get("AWS_REGION") or "us-east-1", "connect_timeout": 5, "request_timeout": 10}
    if endpoint:
        parsed = urlparse(endpoint)
        options["endpoint_override"] = parsed.netloc or parsed.path
        options["scheme"] = parsed.scheme or "https"
    return pafs.S3FileSystem(**options), endpoint or "AWS S3"


def check_sink(uri: str) -> None:
    check_location(uri, "--sink")


def check_location(uri: str, option: str) -> None:
    """For an object-store location: the bucket exists and the credentials are accepted; a local path
    needs nothing. Raises ``DblogError`` with the fix; ``option`` names the setting (``--sink``, ``--state``)."""
    if not is_object_store(uri):
        return
    parsed = urlparse(str(uri))
    if parsed.scheme != "s3":
        if option == "--sink":
            return  # gs://, abfss://: delta-rs reads their own variables; checked on the first write
        raise DblogError(f"{option} {uri}: the state supports a local path or s3://BUCKET/PREFIX only")
    if not (os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")):
        raise DblogError(f"no S3 credentials for {uri}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
                         f"AWS_ENDPOINT_URL / AWS_REGION for a server other than AWS)")
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if endpoint.lower().startswith("http://") and not truthy(os.environ.get("AWS_ALLOW_HTTP", "")):
        # pyarrow (the state, this check) speaks plain http, delta-rs (the lake) only when allowed: its refusal
        # came later, as "OSError: Kernel error -> Generic S3 error"
        raise DblogError(f"AWS_ENDPOINT_URL {endpoint} is plain http: set AWS_ALLOW_HTTP=true (or use https)")
    import pyarrow.fs as pafs

    fs, endpoint = s3_filesystem()
    try:
        info = fs.get_file_info(parsed.netloc)
    except OSError as exc:
        text = str(exc)
        if any(code in text for code in REFUSED):
            raise DblogError(f"{endpoint} refused the S3 credentials for bucket {parsed.netloc}: check "
                             f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") from None
        raise DblogError(f"cannot reach the object store at {endpoint} for {uri}: check AWS_ENDPOINT_URL "
                         f"(and AWS_ALLOW_HTTP=true for http) and that the server runs") from None
    if info.type == pafs.FileType.NotFound:
        raise DblogError(f"bucket {parsed.netloc} does not exist at {endpoint}: create it, or fix {option}")
