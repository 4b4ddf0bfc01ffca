"""Symphony Lab: the development environment for LIPs — debugger, live views, front-ends.

Depends on `symphony_core`; `symphony_core` never imports this package.
"""
