from decice.app import main

main()
