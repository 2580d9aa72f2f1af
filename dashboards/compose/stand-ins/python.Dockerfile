# Stand-in for python:3.11.11-slim-bookworm, built from Debian's packages (see README.md here).
# Debian's Python 3.11 in a virtual environment at /usr/local, so that `python` and `pip` sit
# on PATH and `pip install` writes into /usr/local as in the public image.
FROM rltel-stand-in/debian:bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /usr/local
# The build machine's own certificate authorities (an egress proxy's, say), so that pip in
# an image built FROM this one trusts what the build machine trusts.
COPY ca-certificates/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null \
    && printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > /etc/pip.conf
ENV LANG=C.UTF-8
CMD ["python3"]
