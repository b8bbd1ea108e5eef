import sys

from zkcoord.spark.jvm import main

sys.exit(main())
