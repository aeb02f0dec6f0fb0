"""A small client of Airflow's REST API (v2): what the `zonesync` command triggers
and follows DAG runs with, so users get the same runs, logs and history in the
UI whether they started from the UI, the API or the command line.

Credentials come from the environment (ZONESYNC_AIRFLOW_USER / _PASSWORD) or,
for the local environment, from the generated passwords file; never from code.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request


class AirflowApiError(RuntimeError):
    pass


class AirflowApi:
    def __init__(self, base_url: str, username: str, password: str, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self._username = username
        self._password = password
        self._timeout = timeout
        self._token: str | None = None

    def _raw(self, method: str, path: str, body: dict | None = None, auth: bool = True):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if auth:
            req.add_header("Authorization", f"Bearer {self.token()}")
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                payload = resp.read()
                return resp.status, (json.loads(payload) if payload else None)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            return exc.code, {"detail": detail}
        except (urllib.error.URLError, OSError) as exc:
            raise AirflowApiError(f"Airflow API at {self.base_url} is unreachable ({exc}): is it up?") from exc

    def token(self) -> str:
        if self._token is None:
            status, doc = self._raw(
                "POST", "/auth/token", {"username": self._username, "password": self._password}, auth=False
            )
            if status not in (200, 201) or not doc or "access_token" not in doc:
                raise AirflowApiError(f"login to Airflow as {self._username!r} failed (HTTP {status})")
            self._token = doc["access_token"]
        return self._token

    def call(self, method: str, path: str, body: dict | None = None, ok=(200, 201)):
        status, doc = self._raw(method, path, body)
        if status == 401:  # token expired: log in again once
            self._token = None
            status, doc = self._raw(method, path, body)
        if status not in ok:
            raise AirflowApiError(f"{method} {path}: HTTP {status}: {(doc or {}).get('detail', doc)}")
        return doc

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            status, doc = self._raw("GET", f"/api/v2/dags/{dag_id}")
            if status == 200:
                return doc
            if time.monotonic() > deadline:
                raise AirflowApiError(
                    f"DAG {dag_id} did not appear within {timeout:.0f} s: check the dag-processor log"
                )
            time.sleep(2)

    def trigger(self, dag_id: str, conf: dict | None = None) -> dict:
        return self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        doc = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances")
        return doc.get("task_instances", [])

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value"):
        rid = urllib.parse.quote(run_id, safe="")
        doc = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances/{task_id}/xcomEntries/{key}")
        return doc.get("value")

    def follow(self, dag_id: str, run_id: str, timeout: float = 900.0, on_change=None) -> str:
        """Poll a run until it finishes; call on_change(task_id, state) as tasks move."""
        seen: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while True:
            try:
                run = self.dag_run(dag_id, run_id)
                tis = self.task_instances(dag_id, run_id)
            except AirflowApiError:
                # a busy API server (a loaded 2-core box) can miss one poll: keep following
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
                continue
            for ti in tis:
                state = ti.get("state") or "none"
                if on_change and seen.get(ti["task_id"]) != state:
                    on_change(ti["task_id"], state)
                seen[ti["task_id"]] = state
            if run["state"] in ("success", "failed"):
                return run["state"]
            if time.monotonic() > deadline:
                raise AirflowApiError(f"run {run_id} of {dag_id} still {run['state']} after {timeout:.0f} s")
            time.sleep(1)
