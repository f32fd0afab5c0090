"""What a soak run in a process of its own reads: its resident memory, and the
``"dualbcast"`` log's messages (compiles, for one)."""
import logging


def rss_mb():
    """This process's resident memory, in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


def collected(*fragments):
    """A list that receives every message of the ``"dualbcast"`` logger (at INFO and
    above) containing one of ``fragments``."""
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if any(fragment in message for fragment in fragments):
                messages.append(message)
    logging.getLogger("dualbcast").addHandler(Collect())
    logging.getLogger("dualbcast").setLevel(logging.INFO)
    return messages
