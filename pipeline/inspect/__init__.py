"""Looking at what a run did: its removed documents read back from the inputs, and its report page.

Reads an output the job wrote (its manifest, its removed/ files) and the inputs it names; never
Beam. `pile-pipeline removed` (pipeline/cli/removed.py) and `pile-pipeline report`
(pipeline/cli/report.py) are thin shells over these modules.
"""
