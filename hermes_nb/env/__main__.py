"""``python -m hermes_nb.env {serve,process,evaluate} path/to/env.py[:Class] ...``"""

from hermes_nb.env.cli import main

raise SystemExit(main())
