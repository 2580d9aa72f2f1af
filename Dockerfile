# rltel collector image: `docker compose up` builds it from this checkout.
# No torch: the collector never imports it. Its requirements (every dependency but torch,
# plus the W&B, SwanLab and TensorBoard extras) are read from pyproject.toml by
# dashboards/compose/requirements.py; rltel itself goes in with --no-deps.
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/rltel
COPY pyproject.toml dashboards/compose/requirements.py ./
RUN python requirements.py pyproject.toml > requirements.txt \
    && pip install -r requirements.txt
COPY README.md ./
COPY telemetry ./telemetry
COPY exporters ./exporters
COPY collector ./collector
COPY dashboards ./dashboards
RUN pip install --no-deps . \
    && python -c "import collector.server, exporters.tensorboard, dashboards.webhook"

RUN useradd --system --uid 10001 --home-dir /var/lib/rltel --create-home rltel
USER rltel
WORKDIR /var/lib/rltel
EXPOSE 4317 9464
ENTRYPOINT ["rltel"]
CMD ["collector", "--config", "/etc/rltel/collector.yaml"]
