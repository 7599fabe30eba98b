"""The job's configuration: every option of `pile-pipeline run`, declared once."""
