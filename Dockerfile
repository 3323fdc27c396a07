# One image for every process of compose.yaml and deploy/kubernetes/: the recruiter, its
# standby, the cleaner, the workers and the dashboard differ only by their command.
# It holds this repository's example jobs (examples/); an application builds its own image
# the same way: install recruiter (with the dashboard extra where the dashboard runs) and
# copy its own jobs, then point the workers' --import-path at them.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY pyproject.toml README.md LICENSE /tmp/src/
COPY recruiter /tmp/src/recruiter
RUN pip install '/tmp/src[dashboard]' && rm -rf /tmp/src

# The jobs the workers run (the repository's examples: groups billing and reports), in the
# directory the workers' --import-path names.
WORKDIR /app
COPY examples ./examples

# No process needs root: run as a user of its own.
RUN useradd --create-home --uid 10001 recruiter
USER 10001

CMD ["recruiter", "--help"]
