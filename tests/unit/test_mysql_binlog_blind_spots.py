"""What the MySQL binlog does not say plainly, as pure rules: foreign-key cascades and MERGE tables (which tables
a parent's change reaches without an event), XA statements and prepared groups (held until their outcome), and the tables a
statement-logged statement reaches through triggers, views and stored functions."""
from __future__ import annotations

from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.schema_events import SchemaVersion
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.mysql.cascades import Cascade, changed_through, keys_changed, watched_parents
from airflow_provider_dblog.source.mysql.ddl import altered_engine
from airflow_provider_dblog.source.mysql.mapped_tables import MappedWithoutRows
from airflow_provider_dblog.source.mysql.side_effects import Routines, called, reached
from airflow_provider_dblog.source.mysql.xa import PreparedXa, xa_statement


def edge(child, parent, columns=("id",), on_delete=True, on_update=True):
    return Cascade(f"fk_{child}", child, parent, tuple(columns), on_delete, on_update)


def test_chains_of_cascades_reach_a_captured_grandchild_and_stop_at_cycles():
    edges = [edge("s.c", "s.p"), edge("s.g", "s.c"), edge("s.p", "s.g")]  # a cycle: p -> c -> g -> p
    watched = watched_parents(edges, ["s.g"])
    assert {parent: sorted(t for _, t in through) for parent, through in watched.items()} == {
        "s.c": ["s.g"], "s.p": ["s.g"], "s.g": ["s.g"]}
    assert watched_parents(edges[:2], ["s.p"]) == {}  # nothing cascades into p


def test_only_deletes_and_updates_of_referenced_columns_change_children():
    through = [(edge("s.c", "s.p", ("id",), on_delete=True, on_update=False), "s.c"),
               (edge("s.d", "s.p", ("code",), on_delete=False, on_update=True), "s.d")]
    assert changed_through("delete", (), through) == {"s.c"}
    assert changed_through("write", (), through) == set()
    assert changed_through("update", [({"id": 1, "code": "a", "x": 1}, {"id": 1, "code": "a", "x": 2})], through) == set()
    assert changed_through("update", [({"id": 1, "code": "a"}, {"id": 1, "code": "b"})], through) == {"s.d"}
    assert changed_through("update", [({"id": 1, "code": "a"}, {"id": 2, "code": "a"})], through) == set()  # no rule
    assert changed_through("update", None, through) == {"s.d"}  # not decoded: any UPDATE counts


def test_every_row_change_through_a_merge_table_changes_its_children():
    merge = Cascade("MERGE", "s.c", "s.m", (), True, True, every_change=True)
    for kind in ("write", "update", "delete"):
        assert changed_through(kind, (), [(merge, "s.c")]) == {"s.c"}
    assert changed_through("update", [({"id": 1}, {"id": 1})], [(merge, "s.c")]) == {"s.c"}
    assert {p: [t for _, t in through] for p, through in watched_parents([merge], ["s.c"]).items()} == {"s.m": ["s.c"]}


def test_ddl_that_changes_foreign_keys_reads_the_tables_the_catalog_may_not_show_cascading():
    """The catalog is the server's now; a key added and dropped, or a parent renamed, within a read's range is not in
    it: the tables a cascade through it may have changed are read again."""
    watched = watched_parents([edge("s.c", "s.p"), edge("s.g", "s.c")], ["s.c", "s.g"])  # p -> c -> g, both captured
    captured = ["s.c", "s.g", "s.x"]
    # a key dropped (or a constraint, which may have been one): that table and those it cascades into
    assert keys_changed("s", "ALTER TABLE c DROP FOREIGN KEY fk", watched, captured) == ["s.c", "s.g"]
    assert keys_changed("other", "ALTER TABLE `s`.`X` DROP CONSTRAINT k", watched, captured) == ["s.x"]
    assert keys_changed("s", "ALTER TABLE unrelated DROP FOREIGN KEY fk", watched, captured) == []
    # a cascading key the catalog does not know (an unqualified REFERENCES names the child's database)
    assert keys_changed("other", "ALTER TABLE s.x ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES q (id) ON DELETE CASCADE",
                        watched, captured) == ["s.x"]
    assert keys_changed("s", "CREATE TABLE x (a INT REFERENCES q (id) ON UPDATE SET NULL)", watched, captured) == ["s.x"]
    assert keys_changed("s", "ALTER TABLE c ADD FOREIGN KEY (a) REFERENCES p (id) ON DELETE CASCADE", watched,
                        captured) == []  # known: watched from the read's start
    assert keys_changed("s", "ALTER TABLE x ADD FOREIGN KEY (a) REFERENCES q (id) ON DELETE RESTRICT", watched,
                        captured) == []  # changes no child row
    assert keys_changed("s", "ALTER TABLE x ADD COLUMN note TEXT COMMENT 'REFERENCES q ON DELETE CASCADE'", watched,
                        captured) == []  # a comment is no key
    # a watched parent renamed (either side of a pair): what it cascades into
    assert keys_changed("s", "RENAME TABLE p TO p_old, p_new TO p", watched, captured) == ["s.c", "s.g"]
    assert keys_changed("s", "ALTER TABLE old_name RENAME TO c", watched, captured) == ["s.g"]
    assert keys_changed("s", "RENAME TABLE a TO b", watched, captured) == []
    assert keys_changed("s", "UPDATE p SET id = 2", watched, captured) == []


def test_a_myisam_table_mapped_by_a_statement_without_its_rows_is_named():
    """A write through a MERGE table maps its children and logs the MERGE table's rows only (dropped from the read:
    another table's); the next map of a table already mapped, a map after rows, or a commit ends the statement. A
    table that is not MyISAM now counts once an ENGINE change of it in the read says it may have been."""
    at = [SourcePosition("b.1", n) for n in range(10)]
    maps = MappedWithoutRows(["s.C", "s.d", "s.i"], myisam=["s.c", "s.d"])
    assert maps.myisam_tables == ["s.C", "s.d"]
    assert maps.mapped("s.c", at[0]) == [] and maps.mapped("s.other", at[0]) == []
    assert maps.mapped("s.c", at[1]) == ["s.C"]  # mapped again: the first statement wrote no row of it
    maps.wrote("s.c")
    assert maps.mapped("s.d", at[2]) == []  # after rows: another statement, and c was written
    assert maps.ended(at[3]) == ["s.d"]
    assert maps.ended(at[4]) == []
    maps.mapped("s.d", at[5])
    maps.wrote("s.d")
    assert maps.ended(at[5]) == []
    # InnoDB now: a suspect (a parent's statement maps its foreign-key children too) until its engine changes
    maps.mapped("s.i", at[6])
    assert maps.ended(at[7]) == []
    maps.mapped("s.i", at[8])
    assert maps.ended(at[9]) == []
    assert maps.engine_changed("s.I", "InnoDB") == [("s.i", at[7])]  # the first unwritten map's statement end
    assert maps.engine_changed("s.i", "InnoDB") == []
    assert maps.engine_changed("s.c", "InnoDB") == [] and maps.myisam_tables == ["s.d"]
    assert maps.engine_changed("s.i", "MyISAM") == [] and maps.myisam_tables == ["s.d", "s.i"]
    maps.mapped("s.i", at[9])
    assert maps.ended(at[9]) == ["s.i"]


def test_the_engine_an_alter_puts_a_table_on():
    assert altered_engine("ALTER TABLE c ENGINE=InnoDB") == "InnoDB"
    assert altered_engine("ALTER TABLE c ADD COLUMN x INT, ENGINE = 'MyISAM'") == "MyISAM"
    assert altered_engine("ALTER TABLE c COMMENT 'ENGINE=MyISAM'") is None
    assert altered_engine("CREATE TABLE c (id INT) ENGINE=MyISAM") is None


def test_xa_statements_as_the_binlog_writes_them():
    assert xa_statement("XA END X'7831',X'',1") == ("END", "X'7831',X'',1")
    assert xa_statement("xa commit X'7831', X'', 1") == ("COMMIT", "X'7831',X'',1")
    assert xa_statement("XA COMMIT X'7831',X'',1 ONE PHASE") == ("COMMIT ONE PHASE", "X'7831',X'',1")
    assert xa_statement("XA ROLLBACK X'61',X'62',7") == ("ROLLBACK", "X'61',X'62',7")
    assert xa_statement("XACT") is None and xa_statement("UPDATE t SET xa = 1") is None


def test_a_prepared_group_comes_at_its_commit_and_goes_at_its_rollback():
    meta = TableMeta("s", "t", (Column("id", "int", "int"),), ("id",), "primary")
    at = lambda offset, row=0: SourcePosition.at("mysql-bin.000001", offset, row)  # noqa: E731
    xa = PreparedXa()
    assert list(xa.hold([("row", at(5), ("s.t", None, {"id": 1}, 0))])) == [("row", at(5), ("s.t", None, {"id": 1}, 0))]
    for xid, offset in (("X'01',X'',1", 10), ("X'02',X'',1", 20)):
        xa.begin()
        assert xa.hold([("schema", at(offset), SchemaVersion(meta, at(offset))),
                        ("row", at(offset), ("s.t", None, {"id": offset}, 0)),
                        ("row", at(offset, 1), ("s.t", None, {"id": offset + 1}, 0))]) == ()
        xa.ended(xid)
        xa.prepared(at(offset + 5))
    assert set(xa.undecided(["s.t"])) == {"X'01',X'',1", "X'02',X'',1"} and xa.undecided(["s.u"]) == {}
    xa.rolled_back("X'01',X'',1")
    moved = xa.committed("X'02',X'',1", at(90), row=3)
    assert [(kind, pos) for kind, pos, _ in moved] == [("schema", at(90, 3)), ("row", at(90, 3)), ("row", at(90, 4))]
    assert moved[0][2].pos == at(90, 3) and [p[2]["id"] for k, _, p in moved if k == "row"] == [20, 21]
    assert xa.undecided(["s.t"]) == {} and xa.committed("X'09',X'',1", at(99)) == []  # prepared before the read


def test_a_cascade_inside_an_xa_group_waits_for_its_commit():
    at = lambda offset: SourcePosition.at("mysql-bin.000001", offset)  # noqa: E731
    xa = PreparedXa()
    xa.begin()
    assert xa.hold([("cascade", at(10), ("s.c",))]) == ()
    xa.ended("X'03',X'',1")
    xa.prepared(at(20))
    assert xa.undecided(["s.c"]) == {"X'03',X'',1": (at(20), ["s.c"])}  # the read may not end past it silently
    assert xa.committed("X'03',X'',1", at(30)) == [("cascade", at(30), ("s.c",))]


def test_every_rows_event_class_of_the_replication_library_is_read_or_refused():
    """The library drops the events of classes a reader does not ask for, without a word: a rows-event class
    left out (MySQL's partial JSON updates were) would lose changes silently."""
    from pymysqlreplication.row_event import RowsEvent, TableMapEvent  # noqa: F401

    from airflow_provider_dblog.source.mysql.binlog import _STREAM_EVENTS

    def classes(base):  # the library's (dblog's own rows events come only for the library's class asked for)
        for sub in base.__subclasses__():
            if sub.__module__.startswith("pymysqlreplication"):
                yield sub
            yield from classes(sub)

    assert set(classes(RowsEvent)) <= set(_STREAM_EVENTS), set(classes(RowsEvent)) - set(_STREAM_EVENTS)


ROUTINES = Routines(
    triggers={"s.src": "UPDATE log SET n = n + 1", "s.log": "BEGIN CALL keep(NEW.id); END", "s.quiet": "SET NEW.x = 1"},
    views={"s.v": "select `s`.`orders`.`id` AS `id` from `s`.`orders`", "s.vv": "select * from s.v"},
    routines={"s.keep": "INSERT INTO Audit_Trail VALUES (1)", "s.f": "BEGIN UPDATE vv SET id = 0; RETURN 1; END",
              "s.secret": None},
)
CAPTURED = ["s.orders", "s.audit_trail", "s.items"]


def test_a_statement_reaches_captured_tables_through_triggers_views_and_routines():
    # a trigger's UPDATE of a table whose trigger calls a procedure that writes a captured table
    assert reached(["s.src"], "INSERT INTO src VALUES (1)", ROUTINES, CAPTURED) == {"s.audit_trail"}
    # a view of a view of a captured table
    assert reached(["s.vv"], "UPDATE vv SET id = 1", ROUTINES, CAPTURED) == {"s.orders"}
    # a stored function called in the statement, quoted or not, through the views its body updates
    assert reached([], "SELECT `s`.`f`()", ROUTINES, CAPTURED) == {"s.orders"}
    assert called("SELECT F ( 1 ), now()", ROUTINES) == ["s.f"]
    # a body this user may not read reaches every captured table
    assert reached([], "DO secret()", ROUTINES, CAPTURED) == set(CAPTURED)
    # nothing that links to a captured table
    assert reached(["s.quiet", "s.plain"], "INSERT INTO quiet VALUES (1)", ROUTINES, CAPTURED) == set()
    assert reached([], "SELECT 1", ROUTINES, CAPTURED) == set()
