"""Stand-in components for runner tests: scripts small enough to start in milliseconds,
so the supervisor, HAProxy and links are tested without the real stack."""

__all__ = ["FAKE_HTTP", "FORKING_WORKER", "FORK_STORM"]

FAKE_HTTP = """
import os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit
NAME = os.environ["PROCTOR_COMPONENT"].encode()
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlsplit(self.path)
        if url.path == "/hold":  # answer only once the file named in ?until= exists
            until = parse_qs(url.query)["until"][0]
            while not os.path.exists(until):
                time.sleep(0.01)
        self.send_response(200)
        self.send_header("Content-Length", str(len(NAME)))
        self.send_header("X-Proctor-Node", NAME.decode())
        self.end_headers()
        self.wfile.write(NAME)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
"""An HTTP component answering every GET with its name (``/hold?until=FILE``: once FILE
exists, so a test decides when a request ends); argv: port."""

FORKING_WORKER = """
import os, sys, time
child = os.fork()
if child == 0:
    os.setpgrp()
    with open(sys.argv[1] + ".tmp", "w") as fh:  # written after setpgrp: readers see the final group
        fh.write(str(os.getpid()))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
    os._exit(0)
time.sleep(600)
"""
"""Like an RQ worker with a job running: a forked child that leaves the parent's process
group (RQ's horse calls os.setpgrp). argv: file to write the child's pid to."""

FORK_STORM = """
import os, sys, time
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
while True:
    if os.fork() == 0:
        os.setpgrp()
        os.write(out, b"%d\\n" % os.getpid())
        time.sleep(600)
        os._exit(0)
    time.sleep(0.001)
"""
"""A worker that forks a new horse every millisecond, each leaving the parent's process group
at once: a kill that snapshots the tree and then signals it loses the race to the next fork.
argv: file each child appends its pid to."""
