"""`python -m kubelet` runs the kubelet command."""

import sys

from kubelet.cmd.kubelet import main

sys.exit(main())
