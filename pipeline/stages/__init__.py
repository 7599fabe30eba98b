"""Document stages: what decides, document by document, what the job keeps (docs/development.md)."""
