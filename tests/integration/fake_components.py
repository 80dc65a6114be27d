"""Stand-in components for runner tests: scripts small enough to start in milliseconds,
so the supervisor, HAProxy and links are tested without the real stack."""

__all__ = ["FAKE_HTTP", "FORKING_WORKER"]

FAKE_HTTP = """
import os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
NAME = os.environ["PROCTOR_COMPONENT"].encode()
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(NAME)))
        self.send_header("X-Proctor-Node", NAME.decode())
        self.end_headers()
        self.wfile.write(NAME)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
"""An HTTP component answering every GET with its name; argv: port."""

FORKING_WORKER = """
import os, sys, time
child = os.fork()
if child == 0:
    os.setpgrp()
    time.sleep(600)
    os._exit(0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(child))
time.sleep(600)
"""
"""Like an RQ worker with a job running: a forked child that leaves the parent's process
group (RQ's horse calls os.setpgrp). argv: file to write the child's pid to."""
