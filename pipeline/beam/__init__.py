"""Apache Beam: the jobs (token shards, tokenizer sample), their stages, options and execution plan."""
