"""scripts/comparelib/common.py - what every module of scripts/compare
shares: the source root and the one-line messages to stderr."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def say(msg):
    print('compare: ' + msg, file=sys.stderr, flush=True)


def die(msg, code=1):
    say(msg)
    sys.exit(code)

