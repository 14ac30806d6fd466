"""scripts/comparelib/redis_client.py - a tiny Redis client: RESP over a
socket, pipelining, INFO parsing (python3 standard library only)."""
import socket

class Redis:
    """A tiny RESP client over a socket (python3 standard library only)."""

    def __init__(self, port):
        self.sock = socket.create_connection(('127.0.0.1', port), timeout=60)
        self.buf = b''

    def close(self):
        self.sock.close()

    @staticmethod
    def cmd(*args):
        out = [b'*%d\r\n' % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            out.append(b'$%d\r\n%s\r\n' % (len(a), a))
        return b''.join(out)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError('redis closed the connection')
        self.buf += chunk

    def _line(self):
        while b'\r\n' not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b'\r\n', 1)
        return line

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b'-':
            raise RuntimeError('redis error: ' + rest.decode(errors='replace'))
        if kind in (b'+', b':'):
            return rest
        if kind == b'$':
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b'*':
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError('bad redis reply %r' % line[:40])

    def pipeline(self, cmds):
        self.sock.sendall(b''.join(cmds))
        for _ in cmds:
            self.reply()

    def call(self, *args):
        self.sock.sendall(self.cmd(*args))
        return self.reply()


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def parse_info(raw):
    info = {}
    for line in (raw or b'').decode(errors='replace').splitlines():
        if ':' in line and not line.startswith('#'):
            k, v = line.split(':', 1)
            info[k.strip()] = v.strip()
    return info

