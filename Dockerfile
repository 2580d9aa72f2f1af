# rltel collector image: `docker compose up` builds it from this checkout.
# The CPU build of torch is installed first, pinned, so that `pip install .` does not pull
# a multi-GB CUDA build (the collector itself never imports torch).
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/rltel
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY pyproject.toml README.md ./
COPY telemetry ./telemetry
COPY exporters ./exporters
COPY collector ./collector
COPY dashboards ./dashboards
RUN pip install ".[tensorboard]"

RUN useradd --system --uid 10001 --home-dir /var/lib/rltel --create-home rltel
USER rltel
WORKDIR /var/lib/rltel
EXPOSE 4317 9464
ENTRYPOINT ["rltel"]
CMD ["collector", "--config", "/etc/rltel/collector.yaml"]
