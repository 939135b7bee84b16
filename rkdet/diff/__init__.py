"""rkdet diff: compare result sets bitwise, numerically and by decision; report as text, JSON, HTML.

Entry points: `rkdet.diff.api.compare`, `rkdet.diff.report.write_reports`, `rkdet.tolerance.Tolerance` (the one tolerance value).
"""
