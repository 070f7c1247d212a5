"""The output lease: one run at a time writes into an output directory.

`<output>/_LEASE` (JSON: run id, host, pid, start time, output) is created by the launcher after
planning and before anything in the output is deleted, with create-if-absent semantics:

- a local directory: `os.open(O_CREAT | O_EXCL)`;
- gs://: an upload with the precondition `ifGenerationMatch=0` (GCS refuses it with 412 when
  the object exists), through the google-cloud-storage client Beam's gcsio builds;
- s3://: a PutObject with `If-None-Match: *` (S3 refuses it with 412 when the object exists),
  through the boto3 client Beam's S3 filesystem builds (the same endpoint and credentials);
  it is removed with `If-Match: <ETag>` (only the version read);
- azfs://: a Put Blob with `If-None-Match: *` (Azure refuses it with 409 when the blob exists),
  through the azure-storage-blob client Beam's Azure filesystem builds (the same connection
  string); it is removed with `If-Match: <ETag>` (only the version read);
- another Beam filesystem: an existence check, then a create. Not atomic: two runs started in
  the same instant can both get it (the manifest's last-writer-wins then decides).

A second run finds the lease and stops before deleting anything (`OutputLeasedError`). The
job's last step checks that the lease still names its run right before it writes the manifest
(`check_lease`), and removes it after; the launcher removes its own lease when the run ends,
succeeded or not (`release_lease`). The manifest stays the commit point.

A lease left by a run that died: when it names this host and its pid is no longer running, the
next run takes it over by itself. Otherwise (another host, or a job that ran elsewhere, which
records no pid) nothing here can tell whether that run still writes: the error names the file,
its run id, host and start time, and says to delete the file once that run is known to be dead.
No age makes a lease stale: a Dataflow job may rightly run for many hours.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import json
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

from pipeline.output.entries import EntryKindError, LinkInOutputError, is_link
from pipeline.output.lease_azure import create_azure, delete_azure, read_azure
from pipeline.output.lease_s3 import create_s3, delete_s3, read_s3
from transforms.fs import FileSystems
from transforms.fs_azure import client_errors

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

__all__ = [
    "LEASE_NAME",
    "Lease",
    "LeaseLostError",
    "OutputLeasedError",
    "acquire_lease",
    "check_lease",
    "lease_path",
    "release_lease",
]

LEASE_NAME = "_LEASE"
_READ_TRIES = 20  # a lease another run has just created may not hold its JSON yet (local)


class OutputLeasedError(FileExistsError):
    """Another run holds the output's lease."""


class LeaseLostError(RuntimeError):
    """The run's lease was removed or taken over while the job ran: it must not commit."""


@dataclasses.dataclass(frozen=True)
class Lease:
    """Who holds an output: `pid` is None for a job that runs elsewhere and is not waited for."""

    run_id: str
    host: str
    pid: int | None
    started: str
    output: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any, path: str) -> Lease:
        try:
            pid = data.get("pid")
            return cls(
                str(data["run_id"]),
                str(data["host"]),
                None if pid is None else int(pid),
                str(data["started"]),
                str(data.get("output", "")),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: not a lease: {err!r}") from err

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid is not None else "a job not waited for"
        return f"run {self.run_id} (host {self.host}, {pid}, started {self.started})"


def lease_path(output: str) -> str:
    return FileSystems.join(output, LEASE_NAME)


def _is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) is None


def _is_gcs(path: str) -> bool:
    return FileSystems.get_scheme(path) == "gs"


def _is_s3(path: str) -> bool:
    return FileSystems.get_scheme(path) == "s3"


def _is_azure(path: str) -> bool:
    return FileSystems.get_scheme(path) == "azfs"


def _conditional(path: str) -> bool:
    """Whether the store's own conditional writes make the lease (a version read, removed only
    in that version): gs://, s3://, azfs://."""
    return _is_gcs(path) or _is_s3(path) or _is_azure(path)


def _gcs_blob(path: str, options: PipelineOptions | None) -> Any:
    from apache_beam.io.gcp.gcsio import GcsIO, parse_gcs_path

    bucket, name = parse_gcs_path(path)
    return GcsIO(pipeline_options=options).client.bucket(bucket).blob(name)


def _read_gcs(path: str, options: PipelineOptions | None) -> tuple[bytes, int] | None:
    """The object's bytes and the generation they belong to, or None when there is none."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    blob = _gcs_blob(path, options)
    for _ in range(_READ_TRIES):
        try:
            blob.reload()  # its generation
            return blob.download_as_bytes(if_generation_match=blob.generation), blob.generation
        except NotFound:
            return None
        except PreconditionFailed:  # replaced between the two calls: look again
            continue
    raise OSError(f"{path}: the lease changed {_READ_TRIES} times while it was read")


def _read(path: str, options: PipelineOptions | None = None) -> tuple[Lease, Any] | None:
    """The lease at `path` and its version (a gs:// generation, an s3:// or azfs:// ETag; None
    elsewhere), or None when there is none. ValueError when the file holds no lease."""
    for attempt in range(_READ_TRIES):
        generation = None
        if _conditional(path):
            read = _read_gcs if _is_gcs(path) else read_s3 if _is_s3(path) else read_azure
            found = read(path, options)
            if found is None:
                return None
            data, generation = found
        elif _is_local(path):
            if is_link(path):  # never read (nor removed) through a link (entries.py)
                raise LinkInOutputError(
                    f"{path} is a symbolic link (to {os.readlink(path)}): the output's lease is "
                    "never read or removed through a link; remove the link (its target is kept) "
                    "and run again"
                )
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                return None
        else:
            if not FileSystems.exists(path):
                return None
            with FileSystems.open(path) as f:
                data = f.read()
        try:
            return Lease.from_json(json.loads(data.decode("utf-8")), path), generation
        except ValueError:
            if attempt == _READ_TRIES - 1:
                raise ValueError(
                    f"{path}: the output's lease file is unreadable; if no run writes into "
                    "this output, delete it and run again"
                ) from None
            time.sleep(0.1)  # a local lease is written just after it is created
    return None


def _create(path: str, lease: Lease, options: PipelineOptions | None) -> bool:
    """Create the lease if there is none; False when one is there."""
    data = json.dumps(lease.to_json(), indent=1).encode("utf-8")
    if _is_local(path):
        output = os.path.dirname(path)
        if os.path.exists(output) and not os.path.isdir(output):
            raise EntryKindError(
                f"the output path {output} is a file where the job writes a folder; nothing was "
                "deleted: move it away, or write to another directory"
            )
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except OSError as err:
            if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC):
                raise OSError(
                    f"cannot write into the output directory {output}: {err.strerror} "
                    f"(creating {path}); nothing was changed"
                ) from err
            raise
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return True
    if _is_gcs(path):
        from google.api_core.exceptions import PreconditionFailed

        try:
            _gcs_blob(path, options).upload_from_string(
                data, content_type="application/json", if_generation_match=0
            )
        except PreconditionFailed:
            return False
        return True
    if _is_s3(path):
        return create_s3(path, data, options)
    if _is_azure(path):
        return create_azure(path, data, options)
    if FileSystems.exists(path):
        return False
    with FileSystems.create(path, mime_type="application/json") as f:
        f.write(data)
    return True


def _delete(path: str, run_id: str, options: PipelineOptions | None) -> bool:
    """Delete the lease if it names `run_id`; True when it did."""
    found = _read(path, options)
    if found is None or found[0].run_id != run_id:
        return False
    if _is_gcs(path):
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:  # only the version read: a lease another run created since is kept
            _gcs_blob(path, options).delete(if_generation_match=found[1])
        except (NotFound, PreconditionFailed):
            return False
        return True
    if _is_s3(path):  # only the version read: a lease another run created since is kept
        return delete_s3(path, found[1], options)
    if _is_azure(path):  # the same, with Azure's If-Match
        return delete_azure(path, found[1], options)
    if _is_local(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    else:
        FileSystems.delete([path])
    return True


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, as another user
        return False
    return False


def _dead_here(lease: Lease) -> bool:
    """Whether the run that holds `lease` is known to have ended: its launcher ran on this host
    and that process is gone."""
    return lease.host == socket.gethostname() and lease.pid is not None and _process_gone(lease.pid)


def _take_over(path: str, stale: Lease, generation: Any, options: PipelineOptions | None) -> None:
    """Remove a dead run's lease, and only that one (another run may replace it meanwhile)."""
    if _is_gcs(path):
        from google.api_core.exceptions import NotFound, PreconditionFailed

        with contextlib.suppress(NotFound, PreconditionFailed):
            _gcs_blob(path, options).delete(if_generation_match=generation)
        return
    if _is_s3(path):
        delete_s3(path, generation, options)
        return
    if _is_azure(path):
        delete_azure(path, generation, options)
        return
    if not _is_local(path):
        FileSystems.delete([path])
        return
    aside = f"{path}.{uuid.uuid4().hex}"
    try:
        os.rename(path, aside)  # atomic: of two runs taking over, one moves it
    except FileNotFoundError:
        return
    try:
        with open(aside, "rb") as f:
            moved = Lease.from_json(json.loads(f.read().decode("utf-8")), path)
    except ValueError:
        moved = None
    if moved is None or moved.run_id != stale.run_id:  # a live run's lease: put it back
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    os.unlink(aside)


def acquire_lease(output: str, options: PipelineOptions | None = None, waits: bool = True) -> Lease:
    """Take the output's lease for a new run; OutputLeasedError when another run holds it.

    `waits`: this process waits for the job to end (its pid is recorded, so a lease it leaves
    when killed is known dead on this host); False for a job submitted and not waited for."""
    path = lease_path(output)
    lease = Lease(
        run_id=uuid.uuid4().hex,
        host=socket.gethostname(),
        pid=os.getpid() if waits else None,
        started=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        output=output,
    )
    api_errors: tuple[type[Exception], ...] = ()  # the store's client's, for a lease there
    if _is_gcs(path):
        from google.api_core.exceptions import GoogleAPICallError

        api_errors = (GoogleAPICallError,)
    elif _is_s3(path):
        from botocore.exceptions import BotoCoreError, ClientError

        api_errors = (BotoCoreError, ClientError)
    elif _is_azure(path):
        api_errors = client_errors()
    try:
        for _ in range(3):  # a dead run's lease is taken over once; a race may need another look
            if _create(path, lease, options):
                return lease
            found = _read(path, options)
            if found is None:
                continue  # released meanwhile
            holder, generation = found
            if not _dead_here(holder):
                raise OutputLeasedError(
                    f"{output}: another run holds the output: {holder.describe()}, lease "
                    f"{path}. Wait for it to end; if that run is dead (killed, or a job that "
                    f"failed elsewhere), delete {path} and run again"
                )
            _take_over(path, holder, generation, options)
    except api_errors as err:  # no permission, no bucket, ...
        raise OSError(f"{path}: could not take the output's lease: {err}") from err
    raise OutputLeasedError(f"{output}: another run holds the output (lease {path})")


def check_lease(output: str, run_id: str) -> None:
    """LeaseLostError unless the output's lease still names `run_id` (before the commit)."""
    path = lease_path(output)
    found = _read(path)
    if found is None:
        raise LeaseLostError(
            f"{path}: this run's lease ({run_id}) is gone: it was deleted or another run took "
            "the output over; no manifest written. Run again"
        )
    if found[0].run_id != run_id:
        raise LeaseLostError(
            f"{path}: another run holds the output now ({found[0].describe()}), not this run "
            f"({run_id}); no manifest written"
        )


def release_lease(output: str, run_id: str, options: PipelineOptions | None = None) -> bool:
    """Remove the output's lease if it still names `run_id`; True when it did."""
    return _delete(lease_path(output), run_id, options)
