"""Starting the ranks of a job and ending them together: used by train, inference, verification and bench alike."""
