"""``boot --serve --follow``: a serving worker that follows its alias's assignment and
reports (docs/loader.md#following-a-rollout).

A ``Follower`` owns one running engine (started through an ``EngineLauncher``: vLLM's
OpenAI server in production, a stand-in in the fleet tests) and, every tick:

1. ends when the engine exits (its status is the worker's: a SIGTERM to ``boot`` reaches
   the vLLM server, which drains and exits);
2. samples the engine's ``/metrics`` and, every ``report_interval`` seconds, sends a signed
   fleet report (``loader.reporting``);
3. with ``follow``, every ``poll_seconds``: resolves ``REPO@ALIAS`` for this worker key
   through the registry's TUF metadata from the pinned root (``tuf_resolve.resolve_alias``,
   which checks the rollout plan and step, ``loader.rollout``). A refusal (forged or
   replayed metadata, a step out of order, a quarantined assignment, the registry out of
   reach) is logged loudly and the current bundle keeps serving: a refused assignment never
   switches;
4. when the assignment names another digest, switches:

   a. pulls and verifies the new bundle (``pull.pull_bundle`` of the alias: digest,
      attestations, scan, the worker's policy and release gates) while the old one still
      serves; refused: the old one keeps serving, and the next poll tries again;
   b. keeps the plan's stable bundle verified in the cache (pulled by digest and re-hashed,
      on every switch), so that a rollback starts warm; the reports' ``stable_warm`` says
      whether it is;
   c. removes the readiness file, sends the old engine's last report, and drains it: SIGTERM
      (the server stops accepting and finishes the requests in flight) for up to
      ``drain_seconds``, then SIGKILL, which cancels whatever is still running;
   d. re-hashes the new tree right before the engine opens it, starts it, records the
      load's determinism baseline (``on_loaded``: ``boot --follow`` records and compares it
      as a first boot does, ``loader.worker.record_load``; an enforced divergence refuses
      the switch) and writes the readiness file again. When the new engine does not start
      (or its baseline is refused), the old bundle is started again (it is verified in the
      cache), and that digest is not switched to again until the worker restarts; when the
      old one fails too, ``EngineFailed``.

Errors: ``FollowRefused`` (an ``InputError``) for a worker that cannot follow (no TUF root
to verify assignments from); what ``pull_bundle`` and the launcher raise at the first start.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tuf.api.exceptions import DownloadError, RepositoryError

from modelward.attest.errors import AttestError
from modelward.attest.manifest import verify_tree
from modelward.attest.policy import TrustFlags, policy_from_flags
from modelward.client.api import parse_reference
from modelward.client.errors import RegistryClientError
from modelward.client.tuf import MirrorFetcher
from modelward.loader.cache import Cache
from modelward.loader.errors import EngineFailed, InputError, LoaderError
from modelward.loader.hardening import KvCacheChoice, ServingConfig
from modelward.loader.pull import PulledBundle, pull_bundle
from modelward.loader.reporting import Reporter, ReportSender, Serving, capacity_from_args
from modelward.loader.server import ServedEngine
from modelward.loader.source import RegistrySource
from modelward.loader.statements import WorkerKey
from modelward.loader.tuf_resolve import (
    AliasResolution,
    AliasTrust,
    GivenRoot,
    load_root,
    metadata_dir,
    resolve_alias,
)
from modelward.loader.worker import BootOptions, ServingLoop, load_bundle_spec, record_load

if TYPE_CHECKING:
    from tuf.ngclient import FetcherInterface

__all__ = [
    "KILL_AFTER_DRAIN_SECONDS",
    "VLLM_DEFAULT_CAPACITY",
    "EngineLauncher",
    "FollowOptions",
    "FollowRefused",
    "FollowSource",
    "Follower",
    "RunningEngine",
    "VllmEngine",
    "VllmLauncher",
    "follow_flags_problem",
    "serve_and_follow",
]

Log = Callable[[str], None]

# vLLM's default max_num_seqs for its OpenAI server on most GPUs; the capacity a report
# states when --max-num-seqs is not given (pass it to report the truth)
VLLM_DEFAULT_CAPACITY = 256
KILL_AFTER_DRAIN_SECONDS = 10.0  # a server still up this long after its drain is killed

# what a poll or a switch may meet that refuses the assignment but must not stop serving
_REFUSALS = (
    LoaderError,
    AttestError,
    RegistryClientError,
    RepositoryError,
    DownloadError,
    OSError,
    ValueError,
)


class FollowRefused(InputError):  # noqa: N818 - a refusal, named as one
    """The worker cannot follow its alias (names what is missing)."""


class RunningEngine(Protocol):
    """A started, ready engine serving one bundle."""

    @property
    def base_url(self) -> str: ...

    @property
    def metrics_url(self) -> str: ...

    @property
    def capacity(self) -> int: ...

    def poll(self) -> int | None:
        """The exit status once it exited, else None."""
        ...

    def stop(self, drain_seconds: float) -> None:
        """Drain (SIGTERM), then cancel (SIGKILL) after ``drain_seconds``."""
        ...


# what runs on each engine a switch started; raising refuses the switch
OnLoaded = Callable[[PulledBundle, ServingConfig, RunningEngine], None]


class EngineLauncher(Protocol):
    """Starts an engine on a verified bundle directory and returns it once it is ready
    (``EngineFailed`` otherwise)."""

    def start(self, bundle_dir: Path, config: ServingConfig) -> RunningEngine: ...


class VllmEngine:
    """vLLM's OpenAI server (``loader.server.ServedEngine``) as a ``RunningEngine``."""

    def __init__(self, served: ServedEngine, capacity: int) -> None:
        self.served = served
        self._capacity = capacity

    @property
    def base_url(self) -> str:
        return self.served.base_url

    @property
    def metrics_url(self) -> str:
        return f"{self.served.base_url}/metrics"

    @property
    def capacity(self) -> int:
        return self._capacity

    def poll(self) -> int | None:
        code = self.served.child.poll()
        if code is not None:
            self.served.wait()  # restores the signal handlers
        return code

    def stop(self, drain_seconds: float) -> None:
        # the server drains for its --shutdown-timeout (boot --follow sets it to the drain
        # seconds), then aborts what is left; SIGKILL only if it is still up after that
        self.served.stop(grace=drain_seconds + KILL_AFTER_DRAIN_SECONDS)


@dataclass(frozen=True)
class VllmLauncher:
    """Starts vLLM's OpenAI server as ``boot --serve`` does (pinned, hardened arguments)."""

    host: str
    port: int
    extra_args: tuple[str, ...] = ()
    kv_cache: KvCacheChoice | None = None
    ready_timeout: float = 900.0

    @property
    def capacity(self) -> int:
        return capacity_from_args(self.extra_args, VLLM_DEFAULT_CAPACITY)

    def adopt(self, served: ServedEngine) -> VllmEngine:
        """The server ``boot --serve`` started, as a ``RunningEngine``."""
        return VllmEngine(served, self.capacity)

    def start(self, bundle_dir: Path, config: ServingConfig) -> RunningEngine:
        served = ServedEngine.start(
            config,
            host=self.host,
            port=self.port,
            extra_args=self.extra_args,
            kv_cache=self.kv_cache,
        )
        try:
            served.wait_ready(self.ready_timeout)
        except BaseException:
            served.stop()
            raise
        return VllmEngine(served, self.capacity)


class FollowSource(RegistrySource, ReportSender, Protocol):
    """What a following worker needs from the registry (``RegistryClient``)."""


@dataclass(frozen=True)
class FollowOptions:
    follow: bool = True  # False: serve and report only (``--report-interval`` alone)
    poll_seconds: float = 10.0
    report_interval: float | None = None  # None: no reports
    drain_seconds: float = 30.0
    ready_file: Path | None = None
    workers: int = 4  # parallel blob downloads


@dataclass
class _Current:
    digest: str
    directory: Path
    config: ServingConfig
    engine: RunningEngine


class Follower:
    """One serving worker following ``REPO@ALIAS`` (see the module doc for the loop)."""

    def __init__(
        self,
        client: FollowSource,
        reference: str,
        *,
        cache: Cache,
        flags: TrustFlags,
        worker_key: WorkerKey,
        launcher: EngineLauncher,
        options: FollowOptions,
        log: Log,
        on_loaded: OnLoaded | None = None,
    ) -> None:
        from modelward.attest.keys import keyid

        ref = parse_reference(reference)
        if ref.alias is None:
            raise FollowRefused(f"{reference}: following needs REPO@ALIAS, not a digest or tag")
        self.client = client
        self.repo, self.alias = ref.repo, ref.alias
        self.reference = f"{ref.repo}@{ref.alias}"
        self.cache = cache
        self.flags = flags
        self.worker_key = worker_key
        self.worker_keyid = keyid(worker_key.key.public_key())
        self.launcher = launcher
        self.options = options
        self.log = log
        policy, _trust = policy_from_flags(flags)
        self.trust = AliasTrust(
            root=flags.tuf_root,
            online_aliases=flags.online_aliases,
            metadata_url=flags.metadata_url,
            worker_keyid=self.worker_keyid,
        ).with_policy(policy, flags.policy)
        self._root: GivenRoot | None = (
            load_root(self.trust.root, self.trust.root_source) if self.trust.root else None
        )
        self.serving = Serving(digest="")
        self.stable: str | None = None
        self.current: _Current | None = None
        self.switches = 0
        self.refusals = 0
        # digests whose load failed here (the engine did not start, or its baseline was
        # refused): not switched to again until the worker restarts, so a bad bundle does
        # not cost an engine restart at every poll
        self.failed_loads: set[str] = set()
        self._stop = threading.Event()
        self.reporter: Reporter | None = None
        # called on each engine a switch started (boot --follow: loader.worker.record_load,
        # the baseline every load records); raising refuses the switch
        self.on_loaded = on_loaded
        if options.report_interval is not None:
            self.reporter = Reporter(
                client,
                repo=self.repo,
                alias=self.alias,
                worker_key=worker_key,
                cache_root=cache.root,
                interval=options.report_interval,
            )

    # -- the assignment --------------------------------------------------------------------
    def assignment(self) -> AliasResolution:
        """What ``REPO@ALIAS`` names for this worker now, verified from the pinned root."""
        metadata = metadata_dir(self.cache.root, self.client.base_url)
        if self._root is None and not (metadata / "root.json").exists():
            raise FollowRefused(
                f"{self.reference}: following needs a TUF root to verify assignments from "
                "(--trust-root, the worker policy's tuf.root, or `modelward trust pin`)"
            )
        url, fetcher = self.trust.fetcher(self.client)
        try:
            return resolve_alias(
                self.repo,
                self.alias,
                metadata_url=url,
                cache_dir=metadata,
                trust_root=self._root.data if self._root is not None else None,
                online_aliases=self.trust.online_aliases,
                fetcher=fetcher,
                worker_keyid=self.worker_keyid,
            )
        finally:
            _close(fetcher)

    def _note(self, resolution: AliasResolution) -> None:
        rollout = resolution.rollout
        self.stable = rollout.stable if rollout is not None else resolution.digest
        started = rollout is not None and rollout.index is not None
        self.serving.rollout_id = rollout.rollout_id if started and rollout else None

    # -- starting and adopting -------------------------------------------------------------
    def _pull(self) -> PulledBundle:
        return pull_bundle(
            self.client,
            self.reference,
            self.cache,
            self.flags,
            workers=self.options.workers,
            worker_keyid=self.worker_keyid,
        )

    def start(self) -> None:
        """Pull, verify and start the assigned bundle (errors propagate: nothing serves)."""
        if self.options.follow:
            self._note(self.assignment())
        pulled = self._pull()
        config = ServingConfig.from_spec(pulled.directory, load_bundle_spec(pulled.directory))
        verify_tree(pulled.directory, pulled.manifest)
        engine = self.launcher.start(pulled.directory, config)
        self._serve(_Current(pulled.digest, pulled.directory, config, engine))

    def adopt(
        self,
        digest: str,
        directory: Path,
        config: ServingConfig,
        engine: RunningEngine,
        *,
        launcher: EngineLauncher | None = None,
    ) -> None:
        """Take over an engine started (and verified) elsewhere: ``boot --serve``. Later
        switches start theirs with ``launcher`` when given (the way that engine was started:
        ``serve_and_follow``), else with the one this follower was made with."""
        if launcher is not None:
            self.launcher = launcher
        if self.options.follow or self.reporter is not None:
            try:
                self._note(self.assignment())
            except _REFUSALS as exc:
                self.log(f"warning: {self.reference}: the rollout is not known ({exc})")
        self._serve(_Current(digest, directory, config, engine), ready=False)  # boot wrote it

    def _serve(self, current: _Current, *, ready: bool = True) -> None:
        self.current = current
        self.serving.digest = current.digest
        self.serving.capacity = current.engine.capacity
        if self.stable is None:
            self.stable = current.digest
        self.serving.stable_warm = self._keep_warm(exclude=current.digest)
        if self.reporter is not None:
            self.reporter.engine_started(current.engine.metrics_url)
        if ready:
            self._write_ready()
        self.log(f"serving {self.repo}@{current.digest} at {current.engine.base_url}")

    # -- the loop --------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Drain the engine and end ``run`` (from a signal handler or another thread)."""
        self._stop.set()

    def run(self) -> int:
        """Serve, report and follow until the engine exits or ``request_stop``; the
        engine's exit status (0 after ``request_stop``)."""
        if self.current is None:
            raise RuntimeError("Follower.run before start or adopt")
        options = self.options
        periods = [options.poll_seconds] if options.follow else []
        if options.report_interval is not None:
            periods.append(options.report_interval)
        tick = max(0.2, min([1.0, *periods]))
        next_poll = time.monotonic() + options.poll_seconds
        try:
            while True:
                code = self.current.engine.poll()
                if code is not None:
                    self.log(f"the engine serving {self.current.digest} exited with status {code}")
                    return code
                if self._stop.is_set():
                    self._report()
                    self.current.engine.stop(options.drain_seconds)
                    return 0
                if self.reporter is not None:
                    if self.reporter.due():
                        self._report()
                    else:
                        self.reporter.sample()
                if options.follow and time.monotonic() >= next_poll:
                    self.poll()
                    next_poll = time.monotonic() + options.poll_seconds
                self._stop.wait(tick)
        except BaseException:
            self.current.engine.stop(options.drain_seconds)
            raise
        finally:
            self._remove_ready()
            if self.reporter is not None:
                self.reporter.close()

    def _report(self) -> None:
        if self.reporter is None or not self.serving.digest:
            return
        try:
            self.reporter.report(self.serving)
        except _REFUSALS as exc:  # a report never stops serving
            self.log(f"warning: no report for {self.serving.digest} this interval: {exc}")

    def poll(self) -> None:
        """Step 3 and 4 of the loop: resolve, and switch when the assignment changed."""
        try:
            resolution = self.assignment()
        except _REFUSALS as exc:
            self.refusals += 1
            self.log(
                f"REFUSED: {self.reference}: the assignment is refused, still serving "
                f"{self.serving.digest}: {exc}"
            )
            return
        self._note(resolution)
        if self.current is None or resolution.digest == self.current.digest:
            return
        if resolution.digest in self.failed_loads:
            self.log(
                f"REFUSED: {self.reference}: {resolution.digest} failed to load here before; "
                f"still serving {self.current.digest} (restart the worker to try it again)"
            )
            return
        self._switch(resolution.digest)

    def _switch(self, target: str) -> None:
        assert self.current is not None  # noqa: S101 - run() checked
        old = self.current
        # (a): pull and verify the new bundle while the old one serves
        try:
            pulled = self._pull()
            if pulled.digest == old.digest:
                return  # the assignment moved back meanwhile
            config = ServingConfig.from_spec(pulled.directory, load_bundle_spec(pulled.directory))
        except _REFUSALS as exc:
            self.refusals += 1
            self.log(
                f"REFUSED: {self.reference}: {target} is refused, still serving {old.digest}: {exc}"
            )
            return
        # (b): the stable bundle verified in the cache
        self.serving.stable_warm = self._keep_warm(exclude=pulled.digest)
        self.log(f"switching {self.reference} from {old.digest} to {pulled.digest}")
        # (c): not ready; the old engine's last report; drain, then cancel
        self._remove_ready()
        self._report()
        old.engine.stop(self.options.drain_seconds)
        # (d): re-hash, start the new one (the old one again when it cannot start)
        engine = None
        try:
            verify_tree(pulled.directory, pulled.manifest)
            engine = self.launcher.start(pulled.directory, config)
            if self.on_loaded is not None:  # every load records its baseline
                self.on_loaded(pulled, config, engine)
        except (*_REFUSALS, EngineFailed) as exc:
            self.refusals += 1
            self.failed_loads.add(pulled.digest)
            if engine is not None:
                engine.stop(0)
            self.log(f"REFUSED: {pulled.digest} did not start ({exc}); starting {old.digest} again")
            engine = self.launcher.start(old.directory, old.config)
            self._serve(_Current(old.digest, old.directory, old.config, engine))
            return
        self.switches += 1
        self._serve(_Current(pulled.digest, pulled.directory, config, engine))

    def _keep_warm(self, exclude: str | None) -> bool:
        """Step (b): the stable bundle pulled (by digest) and re-hashed in the cache."""
        stable = self.stable
        if stable is None:
            return False
        if stable == exclude:
            return True  # just pulled and verified, or serving
        try:
            pulled = pull_bundle(
                self.client,
                f"{self.repo}@{stable}",
                self.cache,
                self.flags,
                workers=self.options.workers,
            )
            verify_tree(pulled.directory, pulled.manifest)
        except _REFUSALS as exc:
            self.log(f"warning: the stable bundle {stable} is not warm in the cache: {exc}")
            return False
        return True

    # -- readiness ---------------------------------------------------------------------------
    def _write_ready(self) -> None:
        path = self.options.ready_file
        if path is None or self.current is None:
            return
        detail = {
            "repo": self.repo,
            "alias": self.alias,
            "digest": self.current.digest,
            "rollout_id": self.serving.rollout_id,
            "stable_warm": self.serving.stable_warm,
            "baseline": None,  # boot --follow records it (on_loaded); not in this file
        }
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(detail, sort_keys=True) + "\n")
        temporary.replace(path)

    def _remove_ready(self) -> None:
        if self.options.ready_file is not None:
            self.options.ready_file.unlink(missing_ok=True)


def serve_and_follow(
    client: FollowSource,
    reference: str,
    *,
    cache: Cache,
    flags: TrustFlags,
    worker_key: WorkerKey,
    boot: BootOptions,
    options: FollowOptions,
    log: Log,
) -> ServingLoop:
    """The serving loop ``boot --serve`` hands its server to (``BootOptions.serving_loop``)
    when the worker reports, and with ``options.follow`` follows its alias: a ``Follower``
    over that server. Later switches start vLLM as ``boot`` did (its address, arguments and
    the KV-cache size it chose) and record each load's baseline as a boot does
    (``worker.record_load``). Made before the boot, so that a worker that cannot follow
    (``FollowRefused``, an unreadable root) is refused before vLLM loads."""

    def record(pulled: PulledBundle, config: ServingConfig, engine: RunningEngine) -> None:
        if not isinstance(engine, VllmEngine):  # the launcher below starts only these
            raise TypeError(f"serve_and_follow records vLLM servers, not {type(engine)}")
        record_load(client, engine.served, pulled, config, options=boot, cache=cache, log=log)

    launcher = VllmLauncher(
        host=boot.host, port=boot.port, extra_args=boot.extra_args, ready_timeout=boot.ready_timeout
    )
    follower = Follower(
        client,
        reference,
        cache=cache,
        flags=flags,
        worker_key=worker_key,
        launcher=launcher,
        options=options,
        log=log,
        on_loaded=record,
    )

    def serve(served: ServedEngine, pulled: PulledBundle, config: ServingConfig) -> int:
        again = dataclasses.replace(launcher, kv_cache=served.kv_cache)
        follower.adopt(pulled.digest, pulled.directory, config, again.adopt(served), launcher=again)
        return follower.run()

    return serve


def _close(fetcher: FetcherInterface) -> None:
    if isinstance(fetcher, MirrorFetcher):
        fetcher.close()


def follow_flags_problem(
    *,
    serve: bool,
    worker_key: bool,
    follow: bool,
    given: Sequence[tuple[str, bool]],
    reference_is_alias: bool,
    unsigned_aliases: bool,
) -> str | None:
    """The first misuse of the follow flags, named (None: fine). ``given``: (flag, whether
    it was given) for ``--follow``, ``--poll``, ``--report-interval``, ``--drain-seconds``."""
    named = [flag for flag, present in given if present]
    if not named:
        return None
    first = named[0]
    if not serve:
        return f"{first} needs --serve"
    if not worker_key:
        return (
            f"{first} needs --worker-key (it signs the reports; its key id places the worker "
            "in a rollout's cohorts)"
        )
    for flag in ("--poll", "--drain-seconds"):
        if flag in named and not follow:
            return f"{flag} needs --follow"
    if not reference_is_alias:
        return f"{first} needs a REPO@ALIAS reference (reports and assignments are per alias)"
    if follow and unsigned_aliases:
        return "--follow needs signed aliases: drop --unsigned-aliases (assignments are verified)"
    return None
