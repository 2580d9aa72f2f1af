"""The collector's scrape receiver: Prometheus endpoints (vLLM, SGLang) scraped into runs."""

from collector.scrape.convert import Converter, Scraped
from collector.scrape.engine_figures import engine_figures, quantile
from collector.scrape.health import ScrapeHealth
from collector.scrape.scraper import Scraper
from collector.scrape.target import STREAM, ScrapeError, TargetLoop, fetch

__all__ = [
    "STREAM",
    "Converter",
    "ScrapeError",
    "ScrapeHealth",
    "Scraped",
    "Scraper",
    "TargetLoop",
    "engine_figures",
    "fetch",
    "quantile",
]
