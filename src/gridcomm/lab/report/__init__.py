"""``gridcomm report``: run the benchmark suite that fits the machine and write one self-contained folder
(report.md, report.html, the PNG plots, the raw JSON, a log), or compare two such folders side by side.

suite (which benchmarks, with which options, per machine class and budget), probe (what the machine has),
run (the benchmarks as subprocesses), folder (reading a result folder), figures and the *_tables modules (one
benchmark's JSON as tables of figures), sections (one section per benchmark), render (the whole report),
compare (two folders side by side), document, markdown and html (one document model, two renderers).
"""
