from tfjob_operator.controller.main import main

main()
