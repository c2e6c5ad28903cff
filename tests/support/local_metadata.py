"""Reading a local Airflow's SQLite metadata database (``AIRFLOW_HOME/airflow.db``): run and task
states and return-value XComs, for the demo and the end-to-end tests that drive Airflow in
subprocesses (``airflow dags test``, API server + scheduler)."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path


class LocalAirflowMetadata:
    def __init__(self, home: Path):
        self.path = Path(home) / "airflow.db"

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def run_state(self, dag_id: str) -> str | None:
        """The state of the DAG's latest run."""
        with self.connect() as conn:
            row = conn.execute("SELECT state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1",
                               (dag_id,)).fetchone()
        return row[0] if row else None

    def task_states(self, dag_id: str) -> dict[tuple[str, int], dict]:
        """(task_id, map_index) -> state, try number and rendered map-index label, in start order."""
        with self.connect() as conn:
            rows = conn.execute("SELECT task_id, map_index, state, try_number, rendered_map_index FROM task_instance "
                                "WHERE dag_id = ? ORDER BY start_date IS NULL, start_date, map_index",
                                (dag_id,)).fetchall()
        return {(r[0], r[1]): {"state": r[2], "try": r[3], "label": r[4]} for r in rows}

    def xcom(self, dag_id: str, task_id: str):
        """The latest return value of a task (XComs are stored JSON-encoded, sometimes twice)."""
        with self.connect() as conn:
            row = conn.execute("SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value' "
                               "ORDER BY dag_run_id DESC LIMIT 1", (dag_id, task_id)).fetchone()
        value = json.loads(row[0]) if row else None
        return json.loads(value) if isinstance(value, str) else value
