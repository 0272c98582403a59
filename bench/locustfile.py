"""The mix a lab puts on Gantry: browse pages, list and filter jobs, open job pages and
follow their live log over the websocket, submit and cancel jobs through the API. Each
simulated user signs in with their own session cookie (pages and websocket) and API token
(API), read from the file bench/load.py writes."""

import json
import os
import random
import time
from pathlib import Path

import gevent
from locust import FastHttpUser, between, task

CREDENTIALS = [
    line.split() for line in Path(os.environ["GANTRY_BENCH_CREDENTIALS"]).read_text().splitlines() if line.strip()
]


class LabMember(FastHttpUser):
    wait_time = between(0.5, 2.0)

    def on_start(self):
        self.username, self.token, self.session, project_ids = random.choice(CREDENTIALS)
        self.projects = [int(p) for p in project_ids.split(",")]
        self.api = {"Authorization": f"Bearer {self.token}"}
        self.cookies = {"Cookie": f"sessionid={self.session}"}
        self.jobs = []

    @task(4)
    def job_list_page(self):
        self.client.get("/jobs/", headers=self.cookies, name="page: job list")

    @task(3)
    def job_list_filtered_api(self):
        state = random.choice(["succeeded", "failed", "queued", "running"])
        with self.client.get(f"/api/v1/jobs/?status={state}&page_size=50", headers=self.api, name="api: job list filtered", catch_response=True) as r:
            if r.status_code == 200:
                self.jobs = [j["id"] for j in r.json()["results"]][:20] or self.jobs

    @task(3)
    def job_detail(self):
        if not self.jobs:
            return
        job = random.choice(self.jobs)
        self.client.get(f"/jobs/{job}/", headers=self.cookies, name="page: job detail")
        self.client.get(f"/api/v1/jobs/{job}/", headers=self.api, name="api: job detail")

    @task(2)
    def projects(self):
        self.client.get("/projects/", headers=self.cookies, name="page: project list")
        self.client.get("/api/v1/projects/", headers=self.api, name="api: project list")
        self.client.get(f"/projects/{random.choice(self.projects)}/", headers=self.cookies, name="page: project detail")

    @task(1)
    def home(self):
        self.client.get("/", headers=self.cookies, name="page: home")

    @task(1)
    def submit_and_cancel(self):
        # The job asks for a GPU, which the benchmark machine lacks: it waits in the queue
        # (admission runs and says why) until cancelled. In a lab, jobs run on GPU nodes,
        # not on the web server's machine; here their processes would only measure
        # Python start-up competing with the web workers for the same two cores.
        body = {"project": random.choice(self.projects), "name": "bench", "command": "python -c pass",
                "kind": "train", "gpus": 1}
        with self.client.post("/api/v1/jobs/", json=body, headers=self.api, name="api: submit job", catch_response=True) as r:
            if r.status_code != 201:
                r.failure(f"{r.status_code}: {r.text[:200]}")
                return
            job = r.json()["id"]
        self.client.post(f"/api/v1/jobs/{job}/cancel/", headers=self.api, name="api: cancel job")

    @task(2)
    def follow_live_log(self):
        """A job page's live socket: timed from connecting until the backlog is sent
        ("caught_up"), then held open a few seconds as a person reading would."""
        # websocket-client's blocking sockets are cooperative only when imported after
        # locust's gevent monkey-patching: imported at the top, each recv() froze every
        # simulated user (and locust's own stop timer) until the server answered.
        import websocket

        if not self.jobs:
            return
        job = random.choice(self.jobs)
        url = "ws" + self.host[len("http"):] + f"/ws/jobs/{job}/"
        started = time.perf_counter()
        received, error, ws = 0, None, None
        try:
            ws = websocket.create_connection(url, timeout=10, origin=self.host, cookie=f"sessionid={self.session}")
            while True:
                message = ws.recv()
                if not message:
                    raise ConnectionError(f"closed before catching up (code {ws.status})")
                received += len(message)
                if json.loads(message).get("type") == "caught_up":
                    break
        except Exception as exc:  # reported to locust as this request's failure
            error = exc
        self.environment.events.request.fire(
            request_type="WS", name="ws: job live log", response_time=(time.perf_counter() - started) * 1000,
            response_length=received, exception=error, context={},
        )
        if ws is not None:
            if error is None:
                gevent.sleep(random.uniform(2, 6))
            ws.close()

    @task(1)
    def bare(self):
        self.client.get("/healthz", name="bare view")
