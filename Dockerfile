# rltel collector image: `docker compose up` builds it from this checkout.
#
# Built from the package as it installs: the first stage builds rltel's wheel (what
# pyproject.toml packages, so a new top-level package cannot be left out) and reads the
# collector's requirements from the installed wheel's metadata (`python -m
# collector.requirements`: every dependency but torch and tqdm, which only the training side
# imports, plus the W&B, SwanLab, TensorBoard and Trackio extras). The second installs those, then
# the wheel with --no-deps; no source tree is left in it, and the check runs from outside one.
FROM python:3.11.11-slim-bookworm AS wheel
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
RUN pip wheel --quiet --no-deps --wheel-dir /wheels . \
    && pip install --quiet --no-deps /wheels/rltel-*.whl \
    && cd / && python -m collector.requirements > /wheels/requirements.txt

FROM python:3.11.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Requirements first: this layer is rebuilt only when they change, not with every source edit.
COPY --from=wheel /wheels/requirements.txt /tmp/requirements.txt
RUN pip install --quiet -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt \
    && useradd --system --uid 10001 --home-dir /var/lib/rltel --create-home rltel
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --quiet --no-deps /tmp/wheels/rltel-*.whl && rm -rf /tmp/wheels
USER rltel
WORKDIR /var/lib/rltel
RUN rltel collector --help >/dev/null \
    && HF_HUB_OFFLINE=1 python -c "import collector.server, dashboards.webhook, wandb, swanlab, tensorboard, trackio"
EXPOSE 4317 9464
ENTRYPOINT ["rltel"]
CMD ["collector", "--config", "/etc/rltel/collector.yaml"]
