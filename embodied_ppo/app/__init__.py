"""The application: the Python API, the command line and its commands, the torchrun launcher,
signals, plotting and deployment."""
