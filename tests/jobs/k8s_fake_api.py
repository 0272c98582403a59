"""A fake Kubernetes API server for the backend's tests: real HTTP, real JSON.

No Kubernetes cluster can run on the machines these tests run on, so this stands in
for the API server at its HTTP boundary and nothing else: Gantry's backend uses the
official `kubernetes` client (a kubeconfig pointing here), whose requests, JSON
(de)serialization and `watch.Watch` streaming all run for real. The fake keeps objects
in a dict (create / get / list with label and field selectors / replace / patch /
delete; events are objects too, put there by the tests as a controller would), serves
node lists, and answers watch requests from a script of events, including ERROR 410.
What it does not do is what a cluster does on its own (scheduling, running containers,
garbage collection): the tests play that part by scripting watch events.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

COLLECTIONS = {
    # path segment -> (api prefix, namespaced)
    "namespaces": ("/api/v1", False),
    "nodes": ("/api/v1", False),
    "pods": ("/api/v1", True),
    "services": ("/api/v1", True),
    "secrets": ("/api/v1", True),
    "resourcequotas": ("/api/v1", True),
    "limitranges": ("/api/v1", True),
    "networkpolicies": ("/apis/networking.k8s.io/v1", True),
    "jobs": ("/apis/batch/v1", True),
    "events": ("/api/v1", True),
}


class FakeKubeAPI:
    def __init__(self):
        self.objects: dict[tuple[str, str, str], dict] = {}  # (resource, namespace, name)
        self.requests: list[dict] = []
        self.watch_script: dict[str, list[list[dict]]] = {"pods": [], "jobs": []}
        self.version = 100
        self.uid = 0
        self.lock = threading.Lock()
        # resource -> (HTTP status, message): creates of it are refused so.
        self.refuse_creates: dict[str, tuple[int, str]] = {}
        # While set to an unset Event, creates of `hold_resources` wait for it
        # (`waiting_creates` counts them, `most_waiting` the most at once).
        self.hold_creates: threading.Event | None = None
        self.hold_resources = {"secrets", "jobs", "pods"}
        self.waiting_creates = 0
        self.most_waiting = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.fake = self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "gantry", "user": {"token": "fake-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gantry"}}],
                "current-context": "fake",
            }
        )

    def start(self) -> FakeKubeAPI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- test helpers ------------------------------------------------------------------
    def put(self, resource: str, obj: dict) -> dict:
        meta = obj.setdefault("metadata", {})
        with self.lock:
            self.version += 1
            self.uid += 1
            meta.setdefault("uid", f"uid-{self.uid}")
            meta["resourceVersion"] = str(self.version)
            if resource == "resourcequotas":
                # What the quota controller does at once on a cluster: count the quota.
                obj["status"] = {"hard": dict(obj.get("spec", {}).get("hard", {}))}
            self.objects[(resource, meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def get(self, resource: str, namespace: str, name: str) -> dict | None:
        return self.objects.get((resource, namespace, name))

    def made(self, method: str, resource: str | None = None) -> list[dict]:
        return [
            r
            for r in self.requests
            if r["method"] == method and (resource is None or r["resource"] == resource)
        ]

    def script_watch(self, resource: str, *events: dict) -> None:
        """The next watch request on `resource` streams these events, then ends."""
        self.watch_script[resource].append(list(events))


def _matches(obj: dict, selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _field(obj: dict, path: str):
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _fields_match(obj: dict, selector: str) -> bool:
    """fieldSelector equality terms on dotted paths (`involvedObject.name=x,reason=y`)."""
    for term in filter(None, (selector or "").split(",")):
        path, _, value = term.partition("=")
        if str(_field(obj, path) or "") != value:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    @property
    def fake(self) -> FakeKubeAPI:
        return self.server.fake

    def _parse(self):
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [p for p in url.path.split("/") if p]
        # /api/v1/... or /apis/<group>/<version>/...
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        namespace = name = None
        if rest and rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource = rest[0] if rest else ""
        if len(rest) > 1:
            name = rest[1]
        elif resource == "namespaces" and namespace is None and len(parts) > 3:
            name = None
        return resource, namespace, name, query

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(
            code,
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
             "reason": reason, "code": code},
        )

    def _record(self, method, resource, namespace, name, query, body=None):
        self.fake.requests.append(
            {"method": method, "resource": resource, "namespace": namespace, "name": name,
             "query": query, "body": body}
        )

    def do_GET(self):
        resource, namespace, name, query = self._parse()
        self._record("GET", resource, namespace, name, query)
        if query.get("watch") in ("true", "True", "1"):
            return self._watch(resource)
        fake = self.fake
        if name:
            obj = fake.get(resource, namespace or "", name)
            if obj is None:
                return self._status(404, "NotFound", f'{resource} "{name}" not found')
            return self._send(200, obj)
        items = [
            obj
            for (res, ns, _), obj in sorted(fake.objects.items())
            if res == resource and (namespace is None or ns == namespace)
            and _matches(obj, query.get("labelSelector", ""))
            and _fields_match(obj, query.get("fieldSelector", ""))
        ]
        self._send(200, {"kind": "List", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(fake.version)}, "items": items})

    def _watch(self, resource):
        script = self.fake.watch_script.get(resource) or []
        events = script.pop(0) if script else []
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            line = (json.dumps(event) + "\n").encode()
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def do_POST(self):
        resource, namespace, _, query = self._parse()
        body = self._body()
        self._record("POST", resource, namespace, body["metadata"]["name"], query, body)
        hold = self.fake.hold_creates
        if hold is not None and resource in self.fake.hold_resources:
            with self.fake.lock:
                self.fake.waiting_creates += 1
                self.fake.most_waiting = max(self.fake.most_waiting, self.fake.waiting_creates)
            hold.wait(30)
            with self.fake.lock:
                self.fake.waiting_creates -= 1
        if resource in self.fake.refuse_creates:
            code, message = self.fake.refuse_creates[resource]
            return self._status(code, "Forbidden" if code == 403 else "Invalid", message)
        key = (resource, namespace or "", body["metadata"]["name"])
        if key in self.fake.objects:
            return self._status(409, "AlreadyExists", f'{resource} "{key[2]}" already exists')
        if namespace:
            body["metadata"]["namespace"] = namespace
        self._send(201, self.fake.put(resource, body))

    def do_PUT(self):
        resource, namespace, name, query = self._parse()
        body = self._body()
        self._record("PUT", resource, namespace, name, query, body)
        self._send(200, self.fake.put(resource, body))

    def do_PATCH(self):
        resource, namespace, name, query = self._parse()
        body = self._body()
        self._record("PATCH", resource, namespace, name, query, body)
        obj = self.fake.get(resource, namespace or "", name)
        if obj is None:
            return self._status(404, "NotFound", f'{resource} "{name}" not found')
        obj["metadata"].update(body.get("metadata", {}))
        self._send(200, obj)

    def do_DELETE(self):
        resource, namespace, name, query = self._parse()
        body = self._body()
        self._record("DELETE", resource, namespace, name, query, body)
        obj = self.fake.objects.pop((resource, namespace or "", name), None)
        if obj is None:
            return self._status(404, "NotFound", f'{resource} "{name}" not found')
        self._send(200, obj)
