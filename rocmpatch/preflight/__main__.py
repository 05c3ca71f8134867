import sys

from rocmpatch.preflight.worker import main

sys.exit(main())
