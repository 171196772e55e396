#!/usr/bin/env python3
"""The tests' git server: `git http-backend` as CGI behind HTTP basic auth (pushes allowed: the
authenticated user is passed on as REMOTE_USER), serving every repository under a root directory,
on the host's own address so that a sandbox allowed to reach that address can clone from it and
push to it. Standard library only.

As a module (tests/daytona/test_files.py): `serve(root, user, password, ip)` starts it on a
thread and returns the `ThreadingHTTPServer`; `host_address()` is the address to give it.

As a program (crates/sandboxd/tests/git.rs): `git_server.py ROOT`, with the credentials in
GIT_SERVER_USER and GIT_SERVER_PASSWORD (never on a command line), prints `http://IP:PORT` on one
line of stdout and serves until it is killed.
"""

import base64
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def host_address():
    """The host's own address on its default route (a datagram socket sends nothing)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.123", 9))
        return s.getsockname()[0]
    finally:
        s.close()


class GitHttp(BaseHTTPRequestHandler):
    """`git http-backend` as CGI behind basic auth for `user`:`password`."""

    root = ""
    user = ""
    password = ""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.serve()

    def do_POST(self):
        self.serve()

    def serve(self):
        expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": self.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": self.user,
            "REMOTE_ADDR": self.client_address[0],
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not payload and b"\n\n" in out:
            head, _, payload = out.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def serve(root, user, password, ip):
    """Serves the repositories under `root` on `ip` (a free port) from a daemon thread."""
    handler = type("Handler", (GitHttp,), {"root": root, "user": user, "password": password})
    server = ThreadingHTTPServer((ip, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    ip = host_address()
    server = serve(sys.argv[1], os.environ["GIT_SERVER_USER"], os.environ["GIT_SERVER_PASSWORD"], ip)
    print(f"http://{ip}:{server.server_address[1]}", flush=True)
    threading.Event().wait()
