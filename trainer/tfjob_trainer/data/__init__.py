"""What a task reads: the built-in MNIST-shaped data, its tf.data pipelines, users' file inputs."""
