"""Build the ``wbx`` Typer app and run it with wbcore's error and exit-code rules.

The app is built by a function (no import-time state), so tests build one per runtime.
Expected failures (:class:`WbError`) become one stderr line and the exit code of their
kind; anything else is an internal error whose traceback shows only with ``--debug``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from wbcore_runtime import __version__
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.errors import EXIT_CODES, ErrorKind, NotFound, WbError
from wbcore_runtime.store import leftovers
from wbcore_runtime.contract.errors import DiskFull, disk_full
from wbcore_runtime.runtime import Runtime
from wbcore_cli import fastrun

if TYPE_CHECKING:  # Typer is imported by the commands that need it, never by `wbx run`
    import typer
    from wbcore_cli import toolkit
    from wbcore_cli import listing
    from wbcore_cli import agent as _agent
    from wbcore_cli import audit as _audit_cli
    from wbcore_cli import run as _run_cli
    from wbcore_cli import registered
    from wbcore_cli import shell as _shell_cli
    from wbcore_cli import identity as _identity_cli
    from wbcore_runtime.contract import installs
else:  # imported on first use: a command's group loads only when that command runs (wbx start-up)
    toolkit = lazy.Module("wbcore_cli.toolkit")
    listing = lazy.Module("wbcore_cli.listing")
    _agent = lazy.Module("wbcore_cli.agent")
    _audit_cli = lazy.Module("wbcore_cli.audit")
    _run_cli = lazy.Module("wbcore_cli.run")
    registered = lazy.Module("wbcore_cli.registered")
    _shell_cli = lazy.Module("wbcore_cli.shell")
    _identity_cli = lazy.Module("wbcore_cli.identity")
    installs = lazy.module("wbcore_runtime.contract.installs")

#: Names plugins may not take: the core's own commands, present and planned.
BUILTIN_COMMANDS = frozenset(
    {
        "toolkit", "plugins", "lanes", "tiers", "shapes", "run", "kernel",
        "identity", "audit", "agent", "version", "help", "shell", "commands",
    }
)

#: Commands one of our plugin distributions serves, and which: without it, ``wbx <command>``
#: names what to install instead of Typer's bare "No such command".
PLUGIN_COMMANDS = {
    "demo": "wbcore-demo", "call": "wbcore-act", "act": "wbcore-act", "mcp": "wbcore-mcp",
    "engine": "wbcore-engine", "fan": "wbcore-fabric-local", "pipeline": "wbcore-fabric-local",
    "fed": "wbcore-federation", "llm": "wbcore-llm-local", "snapshot": "wbcore-microvm",
    "publish": "wbcore-publish", "bundle": "wbcore-publish", "library": "wbcore-publish",
    "secrets": "wbcore-brokers-secrets",
}


#: Built-in groups a plugin may add subcommands to: ``add("toolkit import", fn)``.
OPEN_GROUPS = frozenset({"toolkit"})

#: The built-in groups the root's help (``wbx``, ``wbx --help``) and a plugin's command line name
#: without building: their line of help is all that shows, so their modules are not loaded.
GROUP_HELP = {
    "toolkit": "List, show, search, verify and build toolkits.",
    "agent": "Agent definitions, runs of the agent loop, promotion of the toolkits agents make.",
    "identity": "The signing identity: did:key and did:web.",
    "commands": "Registered commands: owners, state; remove orphans.",
    "kernel": "Call kernels (bytes → bytes, instantiated once).",
}


class Registrar:
    """The ``add`` handed to ``wbcore_cli_commands``.

    ``add("GROUP SUB", fn)`` adds ``SUB`` to a built-in group of :data:`OPEN_GROUPS`
    (``wbx toolkit import`` is wbcore-agent-skills'), refused when the group has it already.

    A built-in name, or one another plugin took first, is refused: the command is not
    added and the refusal is kept (``refused``, and on the plugin's ``wbx plugins`` line),
    so that one plugin's mistake never stops ``wbx`` for everything else.
    """

    def __init__(self, app: typer.Typer, runtime: Any = None, only_group: str | None = None,
                 unbuilt: frozenset[str] = frozenset()) -> None:
        self.app = app
        #: Set when the app was built for one group's command: other names are skipped, unrefused.
        self.only_group = only_group
        #: Groups added by name only (the root's help): subcommands for them are skipped, unrefused.
        self.unbuilt = unbuilt
        #: The runtime the app is built over: plugin commands act on it (``add.runtime``).
        self.runtime = runtime
        self.owners: dict[str, str] = {}
        self.current = ""
        #: One line per refused command: "plugin X: command 'run' not added: ...".
        self.refused: list[str] = []

    def __call__(self, name: str, command: typer.Typer | Callable[..., Any], help: str | None = None) -> None:
        import typer

        group, _, sub = name.partition(" ")
        if self.only_group is not None and group != self.only_group:
            return
        if sub:
            self._add_to_group(name, group, sub, command, help)
            return
        if name in BUILTIN_COMMANDS:
            self.refuse(f"command {name!r} not added: it is a built-in wbx command")
            return
        if name in self.owners:
            self.refuse(f"command {name!r} not added: plugin {self.owners[name]} registered it first")
            return
        self.owners[name] = self.current
        if isinstance(command, typer.Typer):
            self.app.add_typer(command, name=name, help=help)
        else:
            self.app.command(name=name, help=help)(command)

    def _add_to_group(self, name: str, group: str, sub: str, command: Any, help: str | None) -> None:
        if group not in OPEN_GROUPS:
            self.refuse(f"command {name!r} not added: plugins add subcommands only to {sorted(OPEN_GROUPS)}")
            return
        target = next((g.typer_instance for g in self.app.registered_groups if g.name == group), None)
        if target is None or group in self.unbuilt:  # the group was not built for this command line
            return
        if name in self.owners or any(c.name == sub for c in target.registered_commands):
            owner = self.owners.get(name)
            self.refuse(f"command {name!r} not added: " + (f"plugin {owner} registered it first" if owner
                                                          else f"wbx {group} has it built in"))
            return
        self.owners[name] = self.current
        target.command(name=sub, help=help)(command)

    def refuse(self, why: str) -> None:
        self.refused.append(f"plugin {self.current}: {why}")
        infos = getattr(self.runtime, "plugin_infos", None) or []
        for info in infos:
            if info.name == self.current and why not in info.warnings:
                info.warnings.append(why)


def _version(value: bool) -> None:
    import typer

    if value:
        typer.echo(f"wbx (wbcore) {__version__}")
        raise typer.Exit()


def open_runtime(runtime: Any = None) -> Any:
    """``runtime``, or one opened from the environment (``WB_PLUGINS`` selects plugins),
    after finishing or undoing what a killed command left in its home."""
    if runtime is None:
        selected = [p.strip() for p in os.environ.get("WB_PLUGINS", "").split(",") if p.strip()]
        runtime = Runtime.open(plugins=selected or None)
    # Every command starts by finishing or undoing what a killed one left (reads only when nothing is).
    if (runtime.home / leftovers.JOURNAL).exists():
        # only when there is a journal: keeps every other start-up light. The installer replays it;
        # with none installed the home is left as it is (the sweep would take the staged folders
        # the journal moves back).
        try:
            installer = installs.service(runtime)
        except NotFound as exc:
            print(f"wbx: warning: {runtime.home / leftovers.JOURNAL}: an interrupted install is left "
                  f"as it is: {exc.message}", file=sys.stderr)
            return runtime
        installer.recover(runtime.home)
    leftovers.sweep_home(runtime.home)
    return runtime


def _command_word(argv: Sequence[str]) -> str | None:
    """The first word that is not a root option: the command ``argv`` asks for."""
    return next((a for a in argv if not a.startswith("-")), None)


def _keep_subcommand(app: typer.Typer, group: str, argv: Sequence[str]) -> None:
    """In ``wbx GROUP SUB …``, drop GROUP's other subcommands before Typer converts them
    (each costs its signature's introspection). An unknown SUB keeps them all, so the
    usage error still lists every choice; ``--help`` anywhere keeps them too."""
    if any(a in ("--help", "-h") for a in argv):
        return
    words = [a for a in argv if not a.startswith("-")]
    if len(words) < 2 or words[0] != group:
        return
    for info in app.registered_groups:
        sub = info.typer_instance
        if info.name != group or sub is None:
            continue
        keep = [c for c in sub.registered_commands if c.name == words[1]]
        if keep:
            sub.registered_commands = keep
            sub.registered_groups = []


def build_app(runtime: Any = None, argv: Sequence[str] | None = None) -> typer.Typer:
    """Build the CLI over ``runtime`` (opened from the environment if ``None``).

    With ``argv``, a built-in command builds only itself (its Typer tree is most of the
    start-up cost of a command such as ``wbx toolkit list``); plugins' commands are added
    for any other word, for ``wbx plugins`` (it shows refused names) and for help."""
    import typer

    runtime = open_runtime(runtime)
    word = _command_word(argv) if argv is not None else None
    only = word if word in BUILTIN_COMMANDS and word not in ("plugins", "help") else None
    plugin_sub = False
    # The root's help and a plugin's command name the groups of GROUP_HELP without building them;
    # wbx plugins (it shows refused subcommands) and shell completion (no argv words: the line is in
    # _WBX_COMPLETE's variables) need every group's commands.
    unbuilt = frozenset(GROUP_HELP) if (argv is not None and only is None and word != "plugins"
                                        and "_WBX_COMPLETE" not in os.environ) else frozenset()

    def group(name: str, build: Callable[[], typer.Typer]) -> typer.Typer | None:
        """Add the group ``name``: built, or empty with its line of help when the root's help is all
        that shows (then ``None``)."""
        built = None if name in unbuilt else build()
        empty = typer.Typer(add_completion=False, rich_markup_mode=None) if built is None else built
        app.add_typer(empty, name=name, help=GROUP_HELP[name])
        return built

    def wanted(*names: str) -> bool:
        return only is None or only in names

    app = typer.Typer(
        name="wbx",
        help="Discover, verify, build, sign and run toolkits as sandboxed WebAssembly.",
        no_args_is_help=True,
        # --install-completion / --show-completion: typer imports its completion module at
        # import time anyway, so the two options cost ~nothing (docs/benchmarks.md).
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                     help="Show the version and exit."),
        debug: bool = typer.Option(False, "--debug", help="Show tracebacks for internal errors."),
    ) -> None:
        """wbx: toolkits as sandboxed WebAssembly."""

    if wanted("toolkit"):
        words = [a for a in argv or () if not a.startswith("-")]
        sub = (words[1] if only == "toolkit" and len(words) > 1 and not {"--help", "-h"} & set(argv or ())
               else None)
        toolkit_app = group("toolkit", lambda: toolkit.build(runtime, sub))
        # wbx toolkit <a plugin's subcommand> (or its help): plugins add their toolkit subcommands below.
        if toolkit_app is not None:
            plugin_sub = sub is None or sub not in {c.name for c in toolkit_app.registered_commands}
    if wanted("plugins", "shapes", "lanes", "tiers"):
        listing.register(app, runtime)
    if wanted("agent"):
        group("agent", lambda: _agent.build(runtime))
    if wanted("audit"):
        _audit_cli.register(app, runtime)
    if wanted("run"):
        _run_cli.register(app, runtime)
    if wanted("commands"):
        group("commands", lambda: registered.build_commands(runtime))
    if wanted("kernel"):
        group("kernel", lambda: registered.build_kernel(runtime))
    if wanted("shell"):
        _shell_cli.register(app, runtime)
    if wanted("identity"):
        group("identity", lambda: _identity_cli.build(runtime))
    if only is not None and not plugin_sub:
        _keep_subcommand(app, only, argv or ())
        return app

    # Only one group built (wbx toolkit <a plugin's subcommand>): plugins add only into it.
    registrar = Registrar(app, runtime, only_group=only, unbuilt=unbuilt)
    for impl in runtime.pm.hook.wbcore_cli_commands.get_hookimpls():
        registrar.current = impl.plugin_name
        try:
            impl.function(add=registrar)
        except Exception as exc:  # a broken plugin loses its commands, never wbx itself
            registrar.refuse(f"its commands were not added: wbcore_cli_commands raised "
                             f"{type(exc).__name__}: {exc}")
    for line in registrar.refused:
        print(f"wbx: warning: {line} (see wbx plugins)", file=sys.stderr)
    if word in PLUGIN_COMMANDS and word not in registrar.owners:
        raise _not_installed(runtime, word, PLUGIN_COMMANDS[word])
    return app


def _not_installed(runtime: Any, command: str, dist: str) -> WbError:
    """``wbx COMMAND`` when no plugin registered it: the distribution that serves it, and why it
    is not there (not installed, failed to load, or left out by ``WB_PLUGINS``)."""
    info = next((i for i in getattr(runtime, "plugin_infos", None) or []
                 if i.origin.partition(" ")[0] == dist), None)
    if info is not None and not info.loaded:
        return NotFound(f"wbx {command} is served by {dist}, which failed to load: {info.error}")
    if info is not None:
        return NotFound(f"wbx {command} is served by {dist}, which did not add it (see wbx plugins)")
    return NotFound(f"wbx {command} is served by {dist}, which is not installed (or not selected by "
                    f"WB_PLUGINS): pip install {dist}")


def main(argv: Sequence[str] | None = None, *, runtime: Any = None) -> int:
    """Run ``wbx`` and return its exit code. ``runtime``: embed over an open Runtime."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        plain = fastrun.parse(args)
        if plain is not None:  # `wbx run NAME …`: no Typer (wbcore_cli.fastrun)
            return fastrun.run(open_runtime(runtime), plain)
        return _typer_main(args, runtime)
    except WbError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        print(f"wbx: {exc.name}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the last line of defence: one line, traceback on --debug
        if debug:
            import traceback

            traceback.print_exc()
        full = _disk_full(exc)
        if full is not None:
            print(f"wbx: {full.name}: {full.message}", file=sys.stderr)
            return full.exit_code
        print(f"wbx: internal: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_CODES[ErrorKind.INTERNAL]


def _typer_main(args: list[str], runtime: Any) -> int:
    import typer

    try:
        app = build_app(runtime, args)
        rv = app(args=args, prog_name="wbx", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        print("wbx: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:  # usage errors: typer prints them with the usage line
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            print(f"wbx: {exc.format_message()}", file=sys.stderr)
        return EXIT_CODES[ErrorKind.INVALID_ARGS] if exc.exit_code == 2 else int(exc.exit_code)
    return rv if isinstance(rv, int) else 0


def _disk_full(exc: BaseException) -> WbError | None:
    """ENOSPC/EDQUOT anywhere (an OSError, or SQLite's "database or disk is full") as disk-full."""
    home = os.environ.get("WB_HOME") or "~/.workbooks"
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and (full := disk_full(cur, cur.filename or home)) is not None:
            return full
        if type(cur).__name__ in ("OperationalError", "DatabaseError") and "disk is full" in str(cur):
            return DiskFull(f"no space left on the disk holding {home} (SQLite: {cur}); free some space and "
                            "try again")
        cur = cur.__cause__ or cur.__context__
    return None


def run() -> None:
    """Console-script entry point.

    The process ends with ``os._exit`` once every ``atexit`` handler has run (the audit's
    last batch, temp folders, worker pools): the handler registered here runs last. Module
    teardown is skipped because it is where wasmtime-py's finalizers find their C bindings
    gone and print "Exception ignored" for every engine, module and instance left alive.
    """
    import atexit

    status = [0]

    def _end() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status[0])

    atexit.register(_end)  # first registered, so it runs after every other handler
    try:
        code = main()
    except SystemExit as exc:  # typer/click may still raise it on some paths
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    status[0] = int(code or 0)
    sys.exit(status[0])
