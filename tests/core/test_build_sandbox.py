"""The build-sandbox service: lanes get their sandbox from the runtime (strict selection)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, PluginError
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.records import BuildLane, BuildSandbox
from wbcore_runtime.contract.sandbox import NONE_INSTALLED, Bind, SandboxLimits, SandboxResult


class Recorder:
    """A test driver: records what a lane asked to run."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.runs: list[tuple[str, ...]] = []

    def run(self, argv, *, binds=(), out_dir: Path, limits=None, env=None, cwd="/out", stdin=None,
            seed_out=None):
        self.runs.append(tuple(argv))
        return SandboxResult(tuple(argv), 0, b"", b"", 0.0, ("test",))

    def probe(self) -> Availability:
        return Availability.yes(self.name)

    def system_binds(self) -> list[Bind]:
        return []

    def own_for_sandbox(self, root: Path) -> None:
        pass


def serving(name: str, available: Availability = Availability.yes()) -> object:
    class Plugin:
        @hookimpl
        def wbcore_build_sandboxes(self):
            yield BuildSandbox(name=name, summary=f"the {name} sandbox", factory=lambda rt: Recorder(name),
                               available=lambda: available)

    Plugin.__name__ = Plugin.__qualname__ = f"Serves_{name}"
    return Plugin()


def native_lane(available: Availability = Availability.yes("cc 1.0")) -> object:
    class Lane:
        @hookimpl
        def wbcore_build_lanes(self):
            yield BuildLane(name="cc", summary="s", where="native cc in the build sandbox",
                            factory=lambda rt: None, available=lambda: available, needs_build_sandbox=True)

    return Lane()


def test_no_sandbox_served_names_what_to_install(make_runtime) -> None:
    rt = make_runtime(plugins=[native_lane()])
    with pytest.raises(NotFound) as err:
        rt.build_sandbox()
    assert err.value.message == NONE_INSTALLED == "no build sandbox is installed; pip install wbcore-process"
    avail = rt.lanes.get("cc").availability(rt)
    assert (avail.ok, avail.reason) == (False, NONE_INSTALLED)


def test_every_missing_piece_is_named(make_runtime) -> None:
    rt = make_runtime(plugins=[native_lane(Availability.no("cc is not installed"))])
    assert rt.lanes.get("cc").availability(rt).reason == f"cc is not installed; {NONE_INSTALLED}"
    rt = make_runtime(plugins=[native_lane(), serving("ns", Availability.no("user namespaces are disabled"))])
    avail = rt.lanes.get("cc").availability(rt)
    assert ((avail.ok, avail.reason)
            == (False, "the build sandbox ns is unavailable here: user namespaces are disabled"))
    rt = make_runtime(plugins=[native_lane(), serving("ns", Availability.yes("7 namespaces"))])
    assert rt.lanes.get("cc").availability(rt) == Availability.yes("cc 1.0; sandbox ns: 7 namespaces")


def test_the_only_sandbox_is_the_lanes(make_runtime, tmp_path: Path) -> None:
    rt = make_runtime(plugins=[serving("ns")])
    box = rt.build_sandbox()
    res = box.run(["/bin/true"], binds=[Bind(tmp_path, "/src")], out_dir=tmp_path,
                  limits=SandboxLimits(wall_seconds=1))
    assert res.ok and box.runs == [("/bin/true",)] and box.name == "ns"
    rt.collect_all()
    info = next(i for i in rt.plugin_infos if i.name == "Serves_ns")
    assert info.serves == {"build sandbox": ["ns"]}


def test_several_sandboxes_need_a_choice(make_runtime) -> None:
    rt = make_runtime(plugins=[serving("ns"), serving("bwrap")])
    with pytest.raises(InvalidArgs,
                       match=r"several build sandboxes are installed \(bwrap, ns\); "
                             r"choose one with WB_BUILD_SANDBOX"):
        rt.build_sandbox()
    assert rt.build_sandbox("bwrap").name == "bwrap"
    rt = make_runtime(plugins=[serving("ns"), serving("bwrap")], env={"WB_BUILD_SANDBOX": "ns"})
    assert rt.build_sandbox().name == "ns"
    with pytest.raises(NotFound, match="unknown build sandbox 'gvisor'; known: bwrap, ns"):
        rt.build_sandbox("gvisor")


def test_two_providers_of_one_sandbox_name_both(make_runtime) -> None:
    one, two = serving("ns"), serving("ns")
    type(two).__name__ = type(two).__qualname__ = "Other_ns"
    rt = make_runtime(plugins=[one, two])
    with pytest.raises(NotFound,
                       match="build sandbox 'ns' is provided twice: "
                             "by .*Serves_ns.* and .*Other_ns.*; uninstall one"):
        rt.build_sandbox()
    with pytest.raises(PluginError, match="provided twice"):
        rt.build_sandbox("ns")


def test_run_and_its_defaults_are_the_cores_one_signature(tmp_path: Path) -> None:
    """A driver implements ``execute``; ``run``'s signature and defaults (no limits given is
    ``SandboxLimits()``, ``/out`` the working folder) are decided once, in the core."""
    from wbcore_runtime.contract.sandbox import BuildSandboxDriver, SandboxRun

    class Driver(BuildSandboxDriver):
        def __init__(self) -> None:
            self.jobs: list[SandboxRun] = []

        def execute(self, job: SandboxRun) -> SandboxResult:
            self.jobs.append(job)
            return SandboxResult(job.argv, 0, b"", b"", 0.0, ("test",))

        def probe(self) -> Availability:
            return Availability.yes()

        def system_binds(self) -> list[Bind]:
            return []

        def own_for_sandbox(self, root: Path) -> None:
            pass

    driver = Driver()
    driver.run(["/bin/cc", "a.c"], out_dir=str(tmp_path))  # type: ignore[arg-type]
    driver.run(["/bin/cc"], binds=[Bind(tmp_path, "/src")], out_dir=tmp_path,
               limits=SandboxLimits(wall_seconds=5), env={"A": "1"}, cwd="/src", stdin=b"x")
    first, second = driver.jobs
    assert first == SandboxRun(("/bin/cc", "a.c"), tmp_path, (), SandboxLimits(), {}, "/out", None, None)
    assert second.binds == (Bind(tmp_path, "/src"),) and second.limits.wall_seconds == 5
    assert (second.env, second.cwd, second.stdin) == ({"A": "1"}, "/src", b"x")
    with pytest.raises(TypeError):
        type("Half", (BuildSandboxDriver,), {})()  # a driver that serves no execute cannot be made
