"""Images built here with podman: the operator's and the trainer's from the Dockerfile on a
debootstrap stand-in base (`podman`), and the example's user image on the trainer's (`example`)."""
