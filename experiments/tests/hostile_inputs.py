#!/usr/bin/env python3
"""Hostile inputs over every program: each flag given each bad value of its kind.

Why this exists: a program that takes a value it cannot use should say so at once (exit 2, one
printable line on stderr naming the value), not crash, not run for minutes, not grow until the
kernel kills it. This test keeps that true for every flag of every program, including flags
added later: it reads each program's flags from its --help and fails when a flag has no entry
in the table (hostile_inputs.txt beside this file).

Each run is one program with one flag set to one bad value (plus the entry's context flags),
in an empty working folder, under a limit on address space and on wall time. A run passes
when it exits 2, writes nothing to stdout and exactly one line to stderr, that line shows no
sign of a crash (an uncaught exception, a backtrace), and the working folder is still empty
(the paths among the bad values are relative to it).

Usage: hostile_inputs.py --bin DIR [--table FILE] [--sample] [--jobs N] [--timeout S]
                         [--memory-gib G] [--fork-server LIB] PROGRAM...
--sample gives each flag one of its bad values (rotating through the kind's values), for the
builds whose programs run slowly (sanitizers); the default gives every value.
--fork-server LIB (hostile_fork_server.cpp, built beside the programs) starts each program once
per worker and runs every case in a child forked from it, the program's main() with the case's
argv: a case then costs a fork rather than LibTorch's half-second start. Without it each case is
a program started anew. --compare runs every case both ways and fails where exit code, output
or files left differ: the check that forking changes nothing a case can see.
"""
import argparse
import concurrent.futures
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time

# The bad values of each kind of flag. Every list holds at least one value of the wrong type and
# the empty string, except kinds whose value is a path or a switch.
OVERFLOW = "99999999999999999999"  # past int64 and uint64
HUGE = "1099511627776"  # 2^40: fits int64, past any count a machine can hold
KINDS = {
    # integers >= 1
    "count": ["-1", "0", HUGE, OVERFLOW, "1e30", "nan", "", "x"],
    # integers >= 0
    "count0": ["-1", HUGE, OVERFLOW, "1e30", "nan", "", "x"],
    # integers >= 0 (or -1 where it means "never") of which any size is harmless: periods, seeds
    "period": ["-2", OVERFLOW, "1e30", "nan", "", "x"],
    # real numbers > 0
    "positive": ["-1", "0", "nan", "inf", "-inf", "1e400", "", "x"],
    # real numbers >= 0
    "real0": ["-1", "nan", "inf", "1e400", "", "x"],
    # real numbers in [0, 1]
    "fraction": ["-0.5", "1.5", "nan", "inf", "", "x"],
    # any finite real number
    "real": ["nan", "inf", "-inf", "1e400", "", "x"],
    # one of a set of names
    "choice": ["", "no-such-value", "\x1b[31mred\udcff"],  # an escape, an invalid UTF-8 byte
    # a schedule's name, or file:PATH of a schedule file
    "schedule": ["", "no-such-value", "\x1b[31mred\udcff", "file:", "file:no/such/file", "file:/",
                 "file:/dev/null", "file:/etc/passwd"],
    # a comma-separated list of counts
    "counts": ["", ",", "2,,2", "x", "-1", "0", OVERFLOW, "1e30"],
    # class lists and ranges ("0-4", "5,7,9")
    "ranges": ["", "1,,2", "x", "-1", "5-2", OVERFLOW],
    # a comma-separated list of names
    "names": [",", "no-such-name", "a,,b"],
    # a comma-separated list of devices
    "devices": ["", ",", "cpu:0,,cpu:1", "gpu:0", "cpu:-1", "cpu:" + OVERFLOW],
    # gpipe_plan's hand-picked shapes
    "grid": ["", "K=x", "K=0", "M=-1", "schedule=zigzag", "bogus=1", "K=" + OVERFLOW],
    # a list of counts that may be empty (--balance "" clears a preset's)
    "optional-counts": [",", "2,,2", "x", "-1", "0", OVERFLOW, "1e30"],
    # a name or nothing (--plan "" plans nothing)
    "optional-choice": ["no-such-value", "\x1b[31mred\udcff"],
    # a comma-separated list of non-negative reals
    "reals": ["", "1,,2", "x", "-1", "nan", "inf"],
    # a size in bytes ("64MiB", "1.5GiB", a plain number)
    "bytes": ["", "x", "-1", "0", "64XB", "1e30", "nan"],
    # a size, or nothing for no limit
    "optional-bytes": ["x", "-1", "0", "64XB", "1e30", "nan"],
    # a file written by the program
    "output": ["", "/", "no/such/folder/out.json"],
    # a folder written by the program
    "output-dir": ["", "/dev/null/sub"],
    # a folder written by the program, where an empty value means "write nothing"
    "optional-output-dir": ["/dev/null/sub"],
    # a file read by the program
    "input": ["", "no/such/file", "/"],
    # a folder read by the program
    "input-dir": ["", "no/such/folder"],
    # a flag without a value
    "switch": ["=maybe"],
    # a value every string of which is legal, or a flag that only prints (--help): no bad values
    "free": [],
}
CRASH_SIGNS = ("terminate called", "what():", "Exception raised from", "frame #", "Aborted",
               "Segmentation fault", "core dumped", "AddressSanitizer", "runtime error:")


def program_flags(program):
    """The long flags a program's --help lists."""
    help_text = subprocess.run([program, "--help"], capture_output=True, text=True,
                               errors="replace", timeout=60).stdout
    flags = []
    for line in help_text.splitlines():
        match = re.match(r"^\s+(?:-\w,)?(--[a-z0-9][a-z0-9-]*)", line)
        if match and match.group(1) not in flags:
            flags.append(match.group(1))
    return flags


def read_table(path):
    """{(program or '', flag): (kind, context)} from the table file."""
    table = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            if len(words) < 2:
                sys.exit(f"{path}:{number}: expected '[PROGRAM:]--flag KIND [CONTEXT...]'")
            program, _, flag = words[0].rpartition(":")
            if words[1] not in KINDS:
                sys.exit(f"{path}:{number}: unknown kind '{words[1]}' (one of {', '.join(KINDS)})")
            for one in program.split(",") if program else [""]:
                key = (one, flag)
                if key in table:
                    sys.exit(f"{path}:{number}: {words[0]} has an entry already")
                table[key] = (words[1], words[2:])
    return table


def limit_memory(gib):
    def apply():
        if gib > 0:
            limit = int(gib * 1024**3)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


class ForkServer:
    """One program started under hostile_fork_server: run() forks a child that runs its main()."""

    def __init__(self, library, program):
        env = dict(os.environ, LD_PRELOAD=library, GPIPE_HOSTILE_FORK_SERVER="1")
        self.program = program
        self.process = subprocess.Popen([program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env)

    def run(self, argv, folder, timeout, memory_gib):
        """(exit code, stdout, stderr) of one case, as subprocess.run gives them; None on timeout."""
        with tempfile.TemporaryDirectory() as outputs:
            out, err = os.path.join(outputs, "out"), os.path.join(outputs, "err")
            fields = [str(int(timeout * 1000)), str(int(memory_gib * 1024**3)), folder, out, err]
            fields += argv
            request = str(len(fields)).encode() + b"\0"
            request += b"".join(os.fsencode(field) + b"\0" for field in fields)
            self.process.stdin.write(request)
            self.process.stdin.flush()
            answer = self.process.stdout.readline().decode().split()
            if not answer:
                raise RuntimeError(f"hostile_fork_server for {argv[0]} stopped "
                                   f"(exit {self.process.wait()}); its stderr says why")
            with open(out, "rb") as f, open(err, "rb") as g:
                stdout, stderr = f.read(), g.read()
        if answer[0] == "timeout":
            return None
        code = int(answer[1]) if answer[0] == "exit" else -int(answer[1])
        return subprocess.CompletedProcess(argv, code, stdout, stderr)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()


class Launcher:
    """Runs cases as fresh processes, or through a fork server of each worker thread, started
    anew when the thread's cases move on to another program (cases come grouped by program)."""

    def __init__(self, args):
        self.args = args
        self.local = threading.local()
        self.servers = []
        self.lock = threading.Lock()

    def run(self, argv, folder, fork):
        """The CompletedProcess of one case run in `folder`; None when it ran out of time."""
        args = self.args
        if not fork:
            try:
                return subprocess.run(argv, capture_output=True, cwd=folder, timeout=args.timeout,
                                      preexec_fn=limit_memory(args.memory_gib))
            except subprocess.TimeoutExpired:
                return None
        server = getattr(self.local, "server", None)
        if server is None or server.program != argv[0]:
            if server is not None:
                server.close()
            server = self.local.server = ForkServer(args.fork_server, argv[0])
            with self.lock:
                self.servers.append(server)
        return server.run(argv, folder, args.timeout, args.memory_gib)

    def close(self):
        for server in self.servers:
            server.close()


def observe(launcher, argv, fork):
    """(CompletedProcess or None on timeout, seconds, files left) of one case in an empty folder."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.monotonic()
        done = launcher.run(argv, folder, fork)
        return done, time.monotonic() - start, sorted(os.listdir(folder))


def run_case(case, launcher):
    """Runs one case; returns None when it passed, else a line saying why it did not."""
    program, flag, value, context = case
    argv = [program] + ([flag + value] if value.startswith("=") else [flag, value]) + context
    shown = " ".join(repr(a) if a == "" or not a.isprintable() or " " in a else a
                     for a in [os.path.basename(program)] + argv[1:])
    done, seconds, left = observe(launcher, argv, fork=bool(launcher.args.fork_server))
    if done is None:
        return f"{shown}: still running after {launcher.args.timeout} s"
    if launcher.args.compare:
        plain, _, plain_left = observe(launcher, argv, fork=False)
        seen = [(r.returncode, r.stdout, r.stderr, files) if r else None
                for r, files in ((done, left), (plain, plain_left))]
        if seen[0] != seen[1]:
            return f"{shown}: forked and started anew differ: {seen[0]} against {seen[1]}"
    stderr = done.stderr.decode("utf-8", errors="replace")
    lines = stderr.splitlines()
    problems = []
    if done.returncode != 2:
        problems.append(f"exit {done.returncode}, not 2")
    if done.stdout:
        problems.append(f"{len(done.stdout)} bytes on stdout")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, not 1")
    if any(sign in stderr for sign in CRASH_SIGNS):
        problems.append("a crash")
    if any(not line.isprintable() for line in lines):
        problems.append("unprintable bytes")
    if left:
        problems.append(f"left {', '.join(left)} behind")
    if not problems:
        return None
    tail = " | ".join(lines[-3:]) if lines else done.stdout.decode(errors="replace")[-200:]
    return f"{shown}: {', '.join(problems)} ({seconds:.1f} s): {tail[:300]}"


def cases_for(program, flags, table, sample):
    """The (program, flag, value, context) runs for one program, and the flags lacking entries."""
    name = os.path.basename(program)
    cases, missing = [], []
    for index, flag in enumerate(flags):
        entry = table.get((name, flag)) or table.get(("", flag))
        if entry is None:
            missing.append(f"{name} {flag}")
            continue
        kind, context = entry
        values = KINDS[kind]
        if sample and values:
            values = [values[(index + len(name)) % len(values)]]
        cases += [(program, flag, value, context) for value in values]
    return cases, missing


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True, help="folder of the programs")
    parser.add_argument("--table", default=os.path.join(os.path.dirname(__file__),
                                                        "hostile_inputs.txt"))
    parser.add_argument("--sample", action="store_true", help="one bad value per flag")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a run may take")
    parser.add_argument("--memory-gib", type=float, default=4.0,
                        help="address-space limit of each run (0: none)")
    parser.add_argument("--fork-server", metavar="LIB",
                        help="hostile_fork_server library: fork each case from a started program")
    parser.add_argument("--compare", action="store_true",
                        help="also start each case anew; fail where the two runs differ")
    parser.add_argument("programs", nargs="+")
    args = parser.parse_args()
    if args.compare and not args.fork_server:
        parser.error("--compare compares forked runs with fresh ones: give --fork-server")

    start = time.monotonic()
    table = read_table(args.table)
    cases, missing, flag_count = [], [], 0
    for name in args.programs:
        program = os.path.join(os.path.abspath(args.bin), name)
        flags = program_flags(program)
        if not flags:
            sys.exit(f"hostile_inputs: {program} --help lists no flags")
        flag_count += len(flags)
        more, lacking = cases_for(program, flags, table, args.sample)
        cases += more
        missing += lacking
    for line in missing:
        print(f"no entry in {os.path.basename(args.table)}: {line} (add one naming its kind)")

    launcher = Launcher(args)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            failures = [f for f in pool.map(lambda c: run_case(c, launcher), cases) if f]
    finally:
        launcher.close()
    for line in failures:
        print(line)
    print(f"hostile_inputs: {len(args.programs)} programs, {flag_count} flags, {len(cases)} runs "
          f"in {time.monotonic() - start:.0f} s: {len(failures)} failed, "
          f"{len(missing)} flags without an entry")
    return 1 if failures or missing else 0


if __name__ == "__main__":
    sys.exit(main())
