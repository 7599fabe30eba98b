"""SpacyStage: the base of the stages that count spaCy's words (the quality filters)."""

from __future__ import annotations

from pipeline.stages.base import DocumentStage


class SpacyStage(DocumentStage):
    """A stage that counts spaCy's words (a quality filter): refused in the driver without spaCy."""

    def check(self) -> None:
        """Refuse a job without spaCy (ValueError naming the stage and the extra)."""
        try:
            import spacy  # noqa: F401
        except ImportError as e:
            raise ValueError(f"--filters {self.name} needs spaCy: pip install 'pile-pipeline[filters]'") from e
