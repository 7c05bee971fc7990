"""``chalk report``: results people can read, as one offline HTML file or a CSV table."""

from chalk_client.report.analysis import Report, analyze
from chalk_client.report.load import Results, read_batch, read_results_file
from chalk_client.report.page import render_page
from chalk_client.report.table import write_csv

__all__ = [
    "Report",
    "Results",
    "analyze",
    "read_batch",
    "read_results_file",
    "render_page",
    "write_csv",
]
