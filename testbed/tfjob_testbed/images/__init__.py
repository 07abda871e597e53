"""Images built here with podman: the operator's and the trainer's from the Dockerfile on a
debootstrap stand-in base (`podman`, `debian_base`), and the example's user image on the trainer's
(`example`); podman on the bed's own storage (`podman_store`), what a build reads
(`build_context`), and the docker archives the real node imports (`docker_archive`)."""
