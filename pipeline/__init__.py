"""pile-pipeline: JSON-lines corpora -> packed token shards + manifest, and the tf.data reader for them.

Layers, lowest first; a module imports only from its own layer or lower ones:

    core      pure algorithms and rules (documents, packing, shuffle, epochs, hashing, options)
    format    the output format: records, TFRecord framing, the manifest (writer <-> reader contract),
              Megatron's indexed dataset (--output_format megatron)
    io        inputs, atomic publishing, spill files, locations and credentials
    tokenize  SentencePiece models, fast engines and their self-check, training, reports
    config    the job's options
    beam      the Beam jobs (the only layer that imports apache_beam)
    cli       the commands
    reader    the tf.data reader: depends on core and format only, importable without Beam

Entry points: `python -m pipeline.run` (= `pile-pipeline run`) and `from pipeline import tfdata`.
"""
