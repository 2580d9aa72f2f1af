# Stand-in for prom/alertmanager, built from Debian's `prometheus-alertmanager` package (see
# README.md here): the same entry point, working directory, user and `wget` as the public image.
FROM rltel-stand-in/debian:bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus-alertmanager wget \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /alertmanager && chown nobody:nogroup /alertmanager
USER nobody
WORKDIR /alertmanager
EXPOSE 9093
ENTRYPOINT ["/usr/bin/prometheus-alertmanager"]
CMD ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"]
