"""Logic the rules share, one module per question it answers: the tree's index and walks
(`ast_index`), finding ranges and fix edits (`edits`), grad mode at a statement
(`grad_mode`), training steps and loops (`training_loops`), parameters (`parameters`),
guards around code (`guards`), and the names of autograd graphs (`graph_names`)."""
