# The Chalk Queue image: the worker, Flower, the HTTP API and the `chalk` command.
#
# Build: docker build -t chalk-queue .   (docker compose builds it too)
# Add your own grading tasks by copying them into tasks/ before `pip install .[worker]`,
# or by building FROM this image and installing a package of your own.
FROM python:3.11-slim-bookworm

# bubblewrap gives scoring scripts their namespaces; setpriv (util-linux) drops them
# to the per-slot users. Both are sandbox layers; see docs/security.md.
# The tests judge's toolchains: C, C++, Java, Go, Rust, JavaScript (Python and bash are
# there already). A worker without one refuses that language's jobs, saying so.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap util-linux \
        gcc g++ libc6-dev openjdk-17-jdk-headless golang-go rustc nodejs \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/chalk-queue
COPY pyproject.toml README.md ./
COPY chalk_client ./chalk_client
COPY chalk_worker ./chalk_worker
COPY tasks ./tasks
RUN pip install --no-cache-dir ".[worker,server]" && mkdir -p /var/lib/chalk/jobs

# The worker runs as root so it can run each script as its own unprivileged uid, make
# cgroups and mount scratch space; scripts never run as root. The image's Python lives in
# /usr/local (readable by all), so the sandbox's users can run {python}.
ENV CHALK_WORK_DIR=/var/lib/chalk/jobs \
    PYTHONUNBUFFERED=1

# Docker mounts /sys/fs/cgroup read-only; with CAP_SYS_ADMIN (docker-compose.yml) the
# entrypoint makes it writable so the sandbox can make its cgroups. Without the
# capability this does nothing, and the worker logs which sandbox layers are off.
ENTRYPOINT ["/bin/sh", "-c", "mount -o remount,rw /sys/fs/cgroup 2>/dev/null; exec \"$@\"", "--"]
CMD ["chalk", "worker", "--loglevel", "INFO"]
