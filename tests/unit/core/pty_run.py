#!/usr/bin/env python3
"""Runs a command on a new pseudo-terminal as its session leader and controlling terminal (as an interactive shell
would), types "typed-line" and end-of-file into the terminal after one second, and prints what the terminal showed;
"TIMEOUT" when the command had not ended after 15 s (it is then killed). test_launch.sh uses it for a worker of
`accel launch` that reads the terminal: in a background process group of the terminal it is stopped by SIGTTIN."""
import os
import pty
import select
import signal
import sys
import time

pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out, end, feed, done = b"", time.time() + 15, time.time() + 1.0, False
while time.time() < end:
    if select.select([fd], [], [], 0.2)[0]:
        try:
            out += os.read(fd, 4096)
        except OSError:
            pass
    if feed and time.time() > feed:
        os.write(fd, b"typed-line\n\x04")
        feed = 0
    if os.waitpid(pid, os.WNOHANG)[0]:
        done = True
        break
while done:  # what it wrote before it ended and was not read yet (the loop may see the exit first)
    try:
        chunk = os.read(fd, 4096) if select.select([fd], [], [], 0.2)[0] else b""
    except OSError:
        chunk = b""
    if not chunk:
        break
    out += chunk
if not done:
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    print("TIMEOUT")
sys.stdout.write(out.decode(errors="replace"))
