"""paddleray's hand-written code: the three services, their shared scaffolding, and the CLI.

Generated protobuf code lives apart, as paddleray.<service>.v1 (from gen/python).
"""
