"""The command/kernel registry: names, reserved built-ins, the dynamic cap, refusals."""

from __future__ import annotations

import pytest

from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.store.registry import MAX_DYNAMIC, Entry, CommandRegistry

SHA = "a" * 64


def test_names_must_match_the_charset(tmp_path):
    reg = CommandRegistry(tmp_path / "r.db")
    for bad in ("", "has space", "semi;colon", "slash/x", "ünïcode", "x" * 200):
        with pytest.raises(InvalidArgs, match="must match"):
            reg.register(Entry("command", bad, SHA, "command"))
    assert reg.register(Entry("command", "ok.name-1_x", SHA, "command")).name == "ok.name-1_x"


def test_reserved_builtins_cannot_be_shadowed_or_removed(tmp_path):
    reg = CommandRegistry(tmp_path / "r.db")
    with pytest.raises(InvalidArgs, match="reserved built-in"):
        reg.register(Entry("command", "upper", SHA, "command"))
    reg.register(Entry("command", "upper", SHA, "command", builtin=True))
    with pytest.raises(InvalidArgs, match="built-in"):
        reg.unregister("command", "upper")
    with pytest.raises(NotFound, match="known: upper"):
        reg.get("command", "uper")


def test_at_most_max_dynamic_entries(tmp_path):
    reg = CommandRegistry(tmp_path / "r.db")
    db = reg._db()
    with reg._lock:
        db.executemany(
            "INSERT INTO entries (kind,name,sha256,shape,created) VALUES ('command',?,?,'command',0)",
            [(f"c{i}", SHA) for i in range(MAX_DYNAMIC)],
        )
    with pytest.raises(InvalidArgs, match=f"{MAX_DYNAMIC} dynamic entries"):
        reg.register(Entry("command", "one-more", SHA, "command"))
    # replacing an existing name is not a new entry
    reg.register(Entry("command", "c1", "b" * 64, "command"))
    assert reg.get("command", "c1").sha256 == "b" * 64


def test_bad_digest_and_kind_are_refused(tmp_path):
    reg = CommandRegistry(tmp_path / "r.db")
    with pytest.raises(InvalidArgs, match="sha256"):
        reg.register(Entry("command", "x", "nothex", "command"))
    with pytest.raises(InvalidArgs, match="kind"):
        reg.register(Entry("widget", "x", SHA, "command"))


def test_lookups_see_writes_from_this_and_other_connections(tmp_path):
    a, b = CommandRegistry(tmp_path / "r.db"), CommandRegistry(tmp_path / "r.db")
    assert a.lookup("command", "x") is None
    b.register(Entry("command", "x", SHA, "command"))
    assert a.lookup("command", "x").sha256 == SHA  # another connection's commit
    a.register(Entry("command", "x", "b" * 64, "command"))
    assert a.lookup("command", "x").sha256 == "b" * 64  # this connection's commit
    assert b.lookup("command", "x").sha256 == "b" * 64
    b.unregister("command", "x")
    assert a.lookup("command", "x") is None


@pytest.mark.parametrize("look_alike", ["Upper", "UPPER", "upper.", "jq.", "Grep..", "WBOX"])
def test_look_alikes_of_reserved_builtins_are_refused(tmp_path, look_alike):
    from wbcore_runtime.store.registry import LookAlikeName
    reg = CommandRegistry(tmp_path / "r.db")
    with pytest.raises(LookAlikeName,
                       match=r"looks like '(upper|jq|grep|wbox)' \(a reserved built-in") as err:
        reg.register(Entry("command", look_alike, SHA, "command", toolkit="tk"))
    assert "Rename #+CLI_BIN in tk" in str(err.value)
    assert reg.lookup("command", look_alike) is None


def test_look_alikes_between_toolkits_are_refused(tmp_path):
    from wbcore_runtime.store.registry import LookAlikeName, name_key
    reg = CommandRegistry(tmp_path / "r.db")
    reg.register(Entry("command", "fmt", SHA, "command", toolkit="a"))
    for other in ("FMT", "fmt.", "Fmt..."):
        with pytest.raises(LookAlikeName, match="owned by toolkit a"):
            reg.register(Entry("command", other, SHA, "command", toolkit="b"))
    # the owner may re-register its own name, and a deployer may hand it over explicitly
    reg.register(Entry("command", "fmt", SHA, "command", toolkit="a"))
    reg.register(Entry("command", "Fmt", SHA, "command", toolkit="b"), take_from="a")
    # the one comparison: NFKC (full-width letters, ligatures), case folding, trailing dots
    assert name_key("ｕｐｐｅｒ") == name_key("UPPER.") == "upper"
    assert name_key("ﬁnd") == "find"
    assert name_key("upper-2") != "upper"
